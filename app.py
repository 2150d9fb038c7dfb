#!/usr/bin/env python3
"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run this, and so can ``python app.py``.

Synthesis is offline: no AWS credentials, no lookups, no Docker. Options are CDK
context values (see docs/operations.md, "Deploying to AWS"), e.g. ``cdk deploy -c throwaway=true``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
# ddbtx is installed editable in the dev environment; a bare checkout finds it here.
for path in (ROOT, ROOT / "shared" / "python"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from infra.assembly import build_app  # noqa: E402  (needs the paths above)
from infra.config import ContextError  # noqa: E402


def main(context: dict[str, Any] | None = None) -> None:
    """Build the app from ``cdk.json`` plus CLI context (plus ``context``, for tests) and
    write the cloud assembly.

    Unusable context values end the run with one line naming every bad key (exit 1).
    """
    try:
        assembly = build_app(context)
    except ContextError as exc:
        sys.exit(f"app.py: {exc}")
    assembly.app.synth()


if __name__ == "__main__":
    main()
