"""The ddbtx CDK app: tables, the core layer, the janitor functions and their monitoring.

One construct per concern (:mod:`infra.tables`, :mod:`infra.layer`,
:mod:`infra.janitors`, :mod:`infra.monitoring`), composed by the thin
:class:`infra.stack.DdbtxStack`. :func:`infra.assembly.build_app` is the one
place an app is put together, for ``app.py`` and the tests alike.
"""

from __future__ import annotations

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
