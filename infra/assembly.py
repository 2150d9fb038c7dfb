"""Builds the CDK app: one function for ``app.py`` and the tests, so both synth the same thing."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks, ServerlessChecks

from infra import REPO_ROOT
from infra.config import CONTEXT_KEYS, DeployConfig
from infra.stack import DdbtxStack

CDK_JSON = REPO_ROOT / "cdk.json"


@dataclass(frozen=True)
class Assembly:
    """An app ready to synthesize, with its one stack and the options it was built from."""

    app: App
    stack: DdbtxStack
    config: DeployConfig


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json`` (feature flags and option defaults).

    The CDK CLI passes it to the app itself; ``python app.py`` on its own does not,
    so the app reads it to synthesize the same template either way.
    """
    context: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")).get("context", {})
    return context


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | os.PathLike[str] | None = None
) -> Assembly:
    """Create the app, its stack and the cdk-nag checks that run on every synth.

    Parameters
    ----------
    context
        Context values layered over ``cdk.json`` (the CLI's ``-c`` values, which it
        passes through ``CDK_CONTEXT_JSON``, still win over both).
    outdir
        Where to write the cloud assembly; defaults to the CLI's choice, else ``cdk.out``.

    Returns
    -------
    Assembly
        The app (call ``app.synth()``), the stack and the parsed configuration.

    Raises
    ------
    ValueError
        When a context value is unusable (the message names the key).

    Examples
    --------
    >>> built = build_app({"throwaway": True}, outdir="/tmp/ddbtx-synth")  # doctest: +SKIP
    >>> built.app.synth().get_stack_by_name(built.stack.stack_name)  # doctest: +SKIP
    """
    app = App(
        context={**cdk_json_context(), **(context or {})},
        outdir=str(outdir or os.environ.get("CDK_OUTDIR") or REPO_ROOT / "cdk.out"),
    )
    config = DeployConfig.from_context(_all_context(app))
    stack = DdbtxStack(app, config.stack_name, config=config)
    # cdk-nag runs as a policy-validation plugin: synth fails on any finding that is
    # not acknowledged next to the construct it concerns.
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return Assembly(app=app, stack=stack, config=config)


def _all_context(app: App) -> dict[str, Any]:
    """Every context value the app sees (cdk.json, ``-c`` through the CLI, the caller's),
    so that keys the app does not know are caught as well as bad values."""
    context: dict[str, Any] = dict(app.node.get_all_context())
    for key in CONTEXT_KEYS:
        context[key] = app.node.try_get_context(key)
    return context
