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


def test_given_a_misspelt_context_key_when_parsed_then_it_is_named_with_the_right_one() -> None:
    # Given `-c throwAway=true` (the key is `throwaway`) and a key that is nothing like one
    # When the context is parsed
    with pytest.raises(ContextError) as raised:
        DeployConfig.from_context({"throwAway": "true", "colour": "blue"})

    # Then each unknown key is a problem, with the key meant where one is close
    assert raised.value.problems == [
        "unknown context key 'throwAway' (did you mean 'throwaway'?)",
        "unknown context key 'colour'",
    ]


def test_given_cdk_feature_flags_when_parsed_then_they_are_not_unknown_keys() -> None:
    # Given the CDK's own keys (namespaced with ':', '/' or '@')
    context = {"@aws-cdk/core:newStyleStackSynthesis": True, "aws:cdk:version-reporting": False}
    # When parsed, Then nothing is refused
    assert DeployConfig.from_context(context).stack_name == "ddbtx"
