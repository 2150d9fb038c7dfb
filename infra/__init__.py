"""The ddbtx CDK app: tables, the core layer, the janitor functions and their monitoring.

One construct per concern (:mod:`infra.tables`, :mod:`infra.layer`,
:mod:`infra.janitors`, :mod:`infra.monitoring`), composed by the thin
:class:`infra.stack.DdbtxStack`. :func:`infra.assembly.build_app` is the one
place an app is put together, for ``app.py`` and the tests alike.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SHARED_DIR: Final = REPO_ROOT / "shared"
FUNCTIONS_DIR: Final = REPO_ROOT / "functions"

#: Files that never belong in a Lambda asset, wherever they appear.
CACHE_EXCLUDES: Final = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "*.egg-info",
    ".DS_Store",
)

#: Node.js majors the CDK's jsii runtime supports; the docs ask for 22 or newer.
SUPPORTED_NODE_MAJORS: Final = (22, 24)
_JSII_SILENCERS: Final = (
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION",
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION",
)


def node_version_note() -> None:
    """On a Node.js the CDK does not support, say so in one line instead of jsii's banner.

    jsii prints a framed warning on such a Node, and its Python runtime forwards
    each line as a raw ``b'!!...'`` bytes literal. This runs before the first
    ``aws_cdk`` import starts Node, prints one readable line instead, and
    silences the banner through jsii's own variables.
    """
    if os.environ.get(_JSII_SILENCERS[0]) is not None:
        return  # already handled (or silenced by the user)
    node = shutil.which("node")
    if node is None:
        return  # jsii reports a missing node itself, readably
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) in SUPPORTED_NODE_MAJORS:
        return
    major = match.group(1)
    for name in _JSII_SILENCERS:
        os.environ[name] = major if name == _JSII_SILENCERS[0] else "1"
    print(
        f"note: Node.js {version} is no longer supported by the AWS CDK (it supports"
        f" {' and '.join(map(str, SUPPORTED_NODE_MAJORS))}); it still runs, but use Node 22+",
        file=sys.stderr,
    )


node_version_note()
