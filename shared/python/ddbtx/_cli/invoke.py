"""``ddbtx invoke``: a janitor's Lambda handler run here, as Lambda would run it.

The handlers live in a checkout's ``functions/`` (they wire Powertools, which the core
never imports), so this loads ``functions/<name>/handler.py`` by path, with the
environment the CDK app gives the function, and calls it with an event and a context
that has what Lambda's has.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from .errors import CliError

#: The janitors a checkout ships, by the name ``ddbtx invoke`` takes.
FUNCTIONS: Final = ("sweeper", "recovery")


class LocalContext:
    """What Lambda's context object carries, for a local invoke: the time left counts down
    from ``timeout`` seconds on the monotonic clock."""

    def __init__(
        self, name: str, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.function_name = f"ddbtx-{name}-local"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{name}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._clock = clock
        self._deadline = clock() + timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))


def scheduled_event() -> dict[str, Any]:
    """The event EventBridge's schedule gives the sweeper (it reads nothing of it)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": os.environ.get("AWS_REGION", "local"),
        "resources": [],
        "detail": {},
    }


def handler_path(name: str, functions_dir: Path) -> Path:
    """``functions/<name>/handler.py``, or a one-line error saying where it was looked for."""
    if name not in FUNCTIONS:
        raise CliError(f"no janitor {name!r}: invoke one of {', '.join(FUNCTIONS)}")
    path = functions_dir / name / "handler.py"
    if not path.is_file():
        raise CliError(
            f"no {path}: run ddbtx invoke in a ddbtx checkout, or name its functions "
            "folder with --functions-dir"
        )
    return path


@contextmanager
def environment(settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in ``os.environ`` while the handler is loaded and runs."""
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def invoke(
    name: str,
    event: Any,
    *,
    functions_dir: Path,
    settings: Mapping[str, str],
    timeout: float,
) -> Any:
    """Cold-start ``functions/<name>/handler.py`` with ``settings`` as its environment
    and return what its handler answers to ``event``."""
    path = handler_path(name, functions_dir)
    if importlib.util.find_spec("aws_lambda_powertools") is None:
        raise CliError(
            "ddbtx invoke runs the handlers, which need Powertools: "
            "pip install 'aws-lambda-powertools[tracer,parser]'"
        )
    # The handler's logs and metrics (what Lambda would log) go to stderr; stdout keeps
    # the answer alone.
    with environment(settings), contextlib.redirect_stdout(sys.stderr):
        spec = importlib.util.spec_from_file_location(f"ddbtx_invoke_{name}_handler", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Lambda imports a handler as a module of its own; pydantic resolves its models there.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.handler(event, LocalContext(name, timeout))
