"""Reading a synthesized ddbtx stack: resources by role, policies as (action, resource) pairs.

CloudFormation references are rendered as short strings so tests can compare
whole sets: ``{"Fn::GetAtt": ["Tbl", "Arn"]}`` becomes ``"Tbl.Arn"``, ``{"Ref": "X"}``
becomes ``"X"``, and ``Fn::Join`` pieces are concatenated.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, ROOT / "shared" / "python"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from aws_cdk import Stack  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from constructs import IConstruct  # noqa: E402
from infra.assembly import build_app  # noqa: E402
from infra.config import DeployConfig  # noqa: E402
from infra.stack import DdbtxStack  # noqa: E402


def render(value: Any) -> Any:
    """A CloudFormation value with intrinsic functions flattened to readable strings."""
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return str(value["Ref"])
        if set(value) == {"Fn::GetAtt"}:
            resource, attribute = value["Fn::GetAtt"]
            return f"{resource}.{attribute}"
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join(str(render(part)) for part in parts)
        return {key: render(item) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item) for item in value]
    return value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Synth:
    """One synthesized app: its template (raw and as assertions), stack, options and outdir."""

    stack: DdbtxStack
    config: DeployConfig
    outdir: Path
    raw: dict[str, Any]

    @property
    def template(self) -> Template:
        return Template.from_json(self.raw)

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.raw["Resources"]
        return resources

    def of_type(self, cfn_type: str) -> dict[str, Any]:
        return {lid: r for lid, r in self.resources.items() if r["Type"] == cfn_type}

    def logical_id(self, construct: IConstruct) -> str:
        """Logical id of an L2 construct's CloudFormation resource (or of an L1 itself)."""
        child = construct.node.default_child or construct
        return str(self.stack.resolve(Stack.of(construct).get_logical_id(child)))  # type: ignore[arg-type]

    def props(self, construct: IConstruct) -> dict[str, Any]:
        props: dict[str, Any] = self.resources[self.logical_id(construct)]["Properties"]
        return props

    def permissions(self, role_logical_id: str) -> set[tuple[str, str]]:
        """Every (action, resource) pair Allowed by the inline policies attached to a role
        (with or without conditions: see :meth:`conditions`)."""
        return {(action, resource) for action, resource, _ in self.grants(role_logical_id)}

    def conditions(self, role_logical_id: str, action: str, resource: str) -> list[Any]:
        """The ``Condition`` of each statement allowing ``action`` on ``resource`` to a role
        (``None`` for a statement without one)."""
        return [c for a, r, c in self.grants(role_logical_id) if (a, r) == (action, resource)]

    def grants(self, role_logical_id: str) -> list[tuple[str, str, Any]]:
        """(action, resource, condition or None) of every Allow statement of a role."""
        found: list[tuple[str, str, Any]] = []
        for policy in self.of_type("AWS::IAM::Policy").values():
            roles = [render(r) for r in policy["Properties"].get("Roles", [])]
            if role_logical_id not in roles:
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow", statement
                for action in as_list(statement["Action"]):
                    for resource in as_list(render(statement["Resource"])):
                        found.append((action, resource, statement.get("Condition")))
        return found

    def asset_dir(self, s3_key: Any) -> Path:
        """The staged directory of a file asset, from the S3 key the template points at."""
        asset_hash = str(s3_key).removesuffix(".zip")
        return self.outdir / f"asset.{asset_hash}"

    def validation_report(self) -> dict[str, Any]:
        return self.report_at(self.outdir)

    @staticmethod
    def report_at(outdir: Path) -> dict[str, Any]:
        """The policy-validation (cdk-nag) report CDK writes into a cloud assembly."""
        report: dict[str, Any] = json.loads(
            (outdir / "validation-report.json").read_text(encoding="utf-8")
        )
        return report


#: ``synth(**context)`` fixture: the app synthesized with those context values.
SynthFactory = Callable[..., Synth]


def synthesize(context: dict[str, Any], outdir: Path) -> Synth:
    """Build the app the way ``app.py`` does (cdk.json + context), synthesize, read it back."""
    built = build_app(context, outdir=outdir)
    assembly = built.app.synth()
    raw = assembly.get_stack_artifact(built.stack.artifact_id).template
    return Synth(stack=built.stack, config=built.config, outdir=outdir, raw=raw)
