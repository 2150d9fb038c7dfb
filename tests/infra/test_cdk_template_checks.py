"""Checkov's suppressions live in the template with their reasons; the KMS option covers logs.

``make check-template`` runs cfn-lint and checkov on the synthesized template (CI does,
after ``make synth``); these tests pin what it may skip, and why.
"""

from __future__ import annotations

from typing import Any

from cdk_support import Synth, SynthFactory, render

pytest_plugins = ("cdk_fixtures",)


def checkov_skips(s: Synth) -> dict[tuple[str, str], str]:
    """(logical id, check id) -> the written reason, for every checkov skip in the template."""
    return {
        (logical_id, skip["id"]): skip.get("comment", "")
        for logical_id, resource in s.resources.items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }


def test_given_default_app_then_each_checkov_skip_has_a_reason_and_only_these_are_skipped(
    default: Synth,
) -> None:
    # Given the default template's checkov suppressions
    skips = checkov_skips(default)
    # Then each carries a written reason
    assert all(len(reason.split()) >= 8 for reason in skips.values()), skips
    # And only these are skipped: no VPC and plain environment variables (both functions),
    # the AWS owned key on the four tables and CloudWatch's own on the two log groups
    counts: dict[str, int] = {}
    for _, check in skips:
        counts[check] = counts.get(check, 0) + 1
    assert counts == {"CKV_AWS_117": 2, "CKV_AWS_173": 2, "CKV_AWS_119": 4, "CKV_AWS_158": 2}


def test_given_a_customer_managed_key_then_tables_and_log_groups_use_it_and_skip_nothing_of_it(
    synth: SynthFactory,
) -> None:
    # Given -c customerManagedKey=true
    s = synth(customerManagedKey="true")
    key_id = s.logical_id(s.stack.tables.key)  # type: ignore[arg-type]
    # Then the janitors' log groups are encrypted with the stack's key
    for janitor in s.stack.janitors.all:
        assert render(s.props(janitor.log_group)["KmsKeyId"]) == f"{key_id}.Arn"
    # And CloudWatch Logs may use it for this account's log groups only
    statements = s.resources[key_id]["Properties"]["KeyPolicy"]["Statement"]
    (logs,) = [st for st in statements if "logs." in str(st["Principal"])]
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]
    # And no KMS finding is left to skip
    assert {check for _, check in checkov_skips(s)} == {"CKV_AWS_117", "CKV_AWS_173"}


def test_given_default_app_then_no_function_depends_on_its_role_twice(default: Synth) -> None:
    # Given each function (its role is already implied by GetAtt Role.Arn: cfn-lint W3005)
    for janitor in default.stack.janitors.all:
        resource: dict[str, Any] = default.resources[default.logical_id(janitor.function)]
        role_id = render(resource["Properties"]["Role"]).removesuffix(".Arn")
        # Then DependsOn names its role's policy only
        (depends_on,) = resource["DependsOn"]
        assert depends_on != role_id and "DefaultPolicy" in depends_on
        policy = default.resources[depends_on]
        assert [render(r) for r in policy["Properties"]["Roles"]] == [role_id]
