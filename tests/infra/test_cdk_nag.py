"""cdk-nag (AwsSolutions and Serverless) runs on every synth; each finding is fixed or
acknowledged with a written reason, and no acknowledgment outlives its finding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk
import pytest
from cdk_support import Synth, SynthFactory, synthesize

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

#: Contexts that between them reach every construct that carries an acknowledgment.
VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"alarmEmail": "ops@example.com", "customerManagedKey": True},
    {"dataTables": "orders", "throwaway": True},
    {"dataTableStream": True, "changeConsumerCode": "examples/change_consumer"},
)


def acknowledgments(s: Synth) -> set[tuple[str, str, str]]:
    """(construct path, rule id, reason) for every acknowledgment in the app."""
    key = aws_cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found = set()
    for construct in s.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule, reason in entry.data.items():
                    found.add((construct.node.path, rule.removeprefix("Annotation::"), reason))
    return found


def findings(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(construct path, rule id) of every violation in a validation report."""
    return {
        (c["constructPath"], v["ruleName"])
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
        for c in v["violatingConstructs"]
    }


@pytest.fixture(scope="module")
def unacknowledged(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[set[tuple[str, str]]]]:
    """Findings per variant when every acknowledgment is ignored (what cdk-nag really sees)."""
    results = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aws_cdk.Validations, "acknowledge", lambda self, *rules: None)
        for context in VARIANTS:
            outdir: Path = tmp_path_factory.mktemp("nag-raw")
            with pytest.raises(RuntimeError, match="ValidationFailed"):
                synthesize(context, outdir)
            results.append(findings(Synth.report_at(outdir)))
    yield results


@pytest.mark.parametrize("context", VARIANTS)
def test_given_any_variant_when_synthesized_then_no_finding_is_left_unacknowledged(
    synth: SynthFactory, context: dict[str, Any]
) -> None:
    # Given/When: synth() raises if cdk-nag fails; Then its report is empty
    s = synth(**context)
    assert s.validation_report()["pluginReports"] == []


@pytest.mark.parametrize("context", VARIANTS)
def test_given_any_variant_then_every_acknowledgment_has_a_written_reason(
    synth: SynthFactory, context: dict[str, Any]
) -> None:
    acks = acknowledgments(synth(**context))
    assert acks
    for path, rule, reason in acks:
        assert rule.startswith(("AwsSolutions-", "Serverless-")), (path, rule)
        assert len(reason.split()) >= 8, (path, rule, reason)


@pytest.mark.parametrize("index", range(len(VARIANTS)))
def test_given_acknowledgments_ignored_then_findings_are_exactly_the_acknowledged_ones(
    synth: SynthFactory, unacknowledged: list[set[tuple[str, str]]], index: int
) -> None:
    # Given the findings raised with acknowledgments switched off
    raw = unacknowledged[index]
    # When we match each finding to the acknowledgment on it or on an ancestor
    acks = {(path, rule) for path, rule, _ in acknowledgments(synth(**VARIANTS[index]))}

    def under(path: str, ancestor: str) -> bool:
        return path == ancestor or path.startswith(ancestor + "/")

    # Then every finding is acknowledged, and every acknowledgment silences a finding
    assert raw
    unacknowledged_findings = {
        (path, rule) for path, rule in raw if not any(r == rule and under(path, p) for p, r in acks)
    }
    stale = {(p, r) for p, r in acks if not any(r == rule and under(fp, p) for fp, rule in raw)}
    assert unacknowledged_findings == set()
    assert stale == set()
