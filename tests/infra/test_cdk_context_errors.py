"""Unusable CDK context values: every bad key is named at once, in one line, before a build."""

from __future__ import annotations

import importlib

import pytest
from cdk_support import ROOT  # noqa: F401  (puts the repo root on sys.path)
from infra.config import ContextError, DeployConfig

BAD = {
    "sweepRateMinutes": "0",
    "logLevel": "TRACE",
    "throwaway": "maybe",
    "customerManagedKey": "true",
    "encryptionKeyArn": "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab",
}


def test_given_several_bad_keys_when_parsed_then_every_one_is_named_at_once() -> None:
    # Given three unusable values and two keys that contradict each other
    # When the context is parsed
    with pytest.raises(ContextError) as raised:
        DeployConfig.from_context(BAD)

    # Then one problem per bad key or clash, all in one line
    problems = raised.value.problems
    assert len(problems) == 4
    for key in ("sweepRateMinutes", "logLevel", "throwaway", "customerManagedKey"):
        assert f"context '{key}'" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_given_bad_context_when_the_cdk_cli_runs_the_app_then_it_exits_with_one_line() -> None:
    # Given bad context values (as `cdk synth -c ...` would pass them)
    app = importlib.import_module("app")

    # When app.py's main builds the app
    with pytest.raises(SystemExit) as exited:
        app.main(BAD)

    # Then it exits with one line (sys.exit prints it, status 1) naming every bad key
    message = exited.value.code
    assert isinstance(message, str) and message.startswith("app.py: bad CDK context: ")
    assert "\n" not in message
    assert all(f"'{key}'" in message for key in BAD)
