"""The core layer is python/ddbtx/ and nothing else; Powertools is the pinned public layer."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template
from cdk_support import ROOT, Synth, SynthFactory, render
from infra.layer import POWERTOOLS_VERSION, JanitorLayers

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

JUNK = (
    "python/ddbtx/__pycache__/schema.cpython-312.pyc",
    "python/ddbtx/stale.pyc",
    "python/ddbtx/.mypy_cache/3.12/x.json",
    "python/ddbtx/tests/test_schema.py",
    "python/ddbtx/test_local.py",
    "python/other_pkg/__init__.py",
    "python/setup.cfg",
    "README.md",
    ".pytest_cache/v/cache/nodeids",
)
KEEP = ("python/ddbtx/__init__.py", "python/ddbtx/schema.py", "python/ddbtx/sub/mod.py")


def files_under(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


def source_modules() -> set[str]:
    """What the layer must carry: every module and marker file of the ddbtx package."""
    shared = ROOT / "shared"
    return {
        p.relative_to(shared).as_posix()
        for p in (shared / "python" / "ddbtx").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".typed")
    }


def test_given_default_app_then_the_layer_asset_is_exactly_the_ddbtx_package(
    default: Synth,
) -> None:
    # Given the default synth; When we open the staged layer asset
    props = default.props(default.stack.layers.core)
    staged = default.asset_dir(props["Content"]["S3Key"])
    files = files_under(staged)
    # Then it holds python/ddbtx/ (every module) and nothing else: no caches, no tests
    assert {"python/ddbtx/__init__.py", "python/ddbtx/schema.py"} <= files
    assert files == source_modules()
    assert props["CompatibleRuntimes"] == ["python3.12"]
    assert props["CompatibleArchitectures"] == ["arm64"]


def test_given_junk_next_to_the_package_then_the_layer_leaves_it_out(tmp_path: Path) -> None:
    # Given a source tree with the package plus caches, tests and unrelated files
    for name in (*KEEP, *JUNK):
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text("x = 1\n", encoding="utf-8")
    app = App(outdir=str(tmp_path / "out"))
    stack = Stack(app, "LayerOnly")
    layers = JanitorLayers(stack, "Layers", source=tmp_path / "src")
    # When the stack is synthesized
    template = Template.from_stack(stack).to_json()
    # Then only the package's own modules are staged
    key = template["Resources"][stack.get_logical_id(layers.core.node.default_child)]  # type: ignore[arg-type]
    staged = (
        tmp_path / "out" / f"asset.{key['Properties']['Content']['S3Key'].removesuffix('.zip')}"
    )
    assert files_under(staged) == set(KEEP)


def test_given_default_app_then_powertools_comes_from_the_public_parameter_for_the_locked_version(
    default: Synth,
) -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    (locked,) = [p["version"] for p in lock["package"] if p["name"] == "aws-lambda-powertools"]
    assert locked == POWERTOOLS_VERSION
    parameters = default.raw["Parameters"]
    (powertools,) = [
        name
        for name, p in parameters.items()
        if p["Default"].startswith("/aws/service/powertools/")
    ]
    assert parameters[powertools] == {
        "Type": "AWS::SSM::Parameter::Value<String>",
        "Default": f"/aws/service/powertools/python/arm64/python3.12/{locked}",
    }
    for j in default.stack.janitors.all:
        assert powertools in render(default.props(j.function)["Layers"])


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_a_powertools_layer_arn_then_it_is_used_instead_of_the_parameter(
    synth: SynthFactory, name: str
) -> None:
    arn = (
        "arn:aws-cn:lambda:cn-north-1:498634801083:layer:"
        "AWSLambdaPowertoolsPythonV3-python312-arm64:27"
    )
    s = synth(powertoolsLayerArn=arn)
    j = getattr(s.stack.janitors, name)
    assert arn in render(s.props(j.function)["Layers"])
    assert not [p for p in s.raw["Parameters"].values() if "powertools" in p["Default"]]
