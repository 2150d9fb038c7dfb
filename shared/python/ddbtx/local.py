"""Local DynamoDB emulators (``moto`` in-process, ``dynalite`` on ``node``) on a free port."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from ._base.dynamo import without_transactions

logger = logging.getLogger(__name__)

Kind = Literal["moto", "dynalite"]
KINDS: tuple[Kind, ...] = ("moto", "dynalite")

#: Credentials and region the emulators accept; never real ones.
LOCAL_CREDENTIALS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "local",
    "aws_secret_access_key": "local",
}


class EmulatorError(RuntimeError):
    """An emulator could not be found or did not start."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmulatorError(f"emulator exited with code {proc.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise EmulatorError(f"emulator did not listen on port {port} within {timeout}s")


def find_dynalite() -> Path:
    """Locate dynalite's ``cli.js``: ``$DDBTX_DYNALITE`` or ``node_modules`` above the cwd."""
    override = os.environ.get("DDBTX_DYNALITE")
    if override:
        if not Path(override).is_file():
            raise EmulatorError(f"DDBTX_DYNALITE names {override!r}, which is not a file")
        return Path(override)
    for folder in [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[3]]:
        candidate = folder / "node_modules" / "dynalite" / "cli.js"
        if candidate.exists():
            return candidate
    raise EmulatorError(
        "dynalite (an npm package) was not found: in a ddbtx checkout run `npm ci` at its"
        " root; elsewhere run `npm install dynalite` and set DDBTX_DYNALITE to its cli.js"
    )


def _linearizable_moto_server(port: int) -> Any:
    """moto one request at a time: it checks a condition and writes without a lock."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def linearizable(environ: Any, start_response: Any) -> list[bytes]:
        with one_at_a_time:
            return list(app(environ, start_response))

    return make_server(
        "127.0.0.1", port, linearizable, threaded=True, request_handler=MotoRequestHandler
    )


class LocalDynamo:
    """A running local DynamoDB emulator.

    Examples
    --------
    >>> with LocalDynamo("moto") as db:            # doctest: +SKIP
    ...     client = db.client()
    ...     client.list_tables()["TableNames"]
    []
    """

    def __init__(self, kind: Kind = "moto", *, own_process: bool = False, port: int = 0) -> None:
        """``own_process``: serve moto from a child interpreter (not sharing the GIL);
        ``port``: the port to serve on (0: a free one)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self.kind: Kind = kind
        self.own_process = own_process
        self.requested_port = port
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._moto: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalDynamo:
        self.port = self.requested_port or free_port()
        if self.kind == "moto" and not self.own_process:
            self._moto = _linearizable_moto_server(self.port)
            threading.Thread(target=self._moto.serve_forever, daemon=True).start()
            _wait_for_port(self.port, 10.0, None)
        else:
            if self.kind == "moto":
                args = [sys.executable, "-m", "ddbtx.local", "serve-moto", str(self.port)]
            else:
                node = shutil.which("node")
                if node is None:
                    raise EmulatorError("node is not on the PATH; dynalite needs Node.js 20+")
                args = [node, str(find_dynalite()), "--host", "127.0.0.1", "--port", str(self.port)]
                # Tables become ACTIVE at once: the protocol never races table creation.
                args += ["--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"]
            self._proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _wait_for_port(self.port, 20.0, self._proc)
        if self.kind == "dynalite":  # it has no TransactWriteItems: never asked for it
            without_transactions(self.endpoint_url)
        logger.info("started %s on %s", self.kind, self.endpoint_url)
        return self

    def client(self, max_attempts: int = 3) -> Any:
        """A boto3 DynamoDB client for this emulator (standard retry mode)."""
        import boto3

        from ._base.dynamo import client_config

        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint_url,
            config=client_config(max_attempts),
            region_name=LOCAL_CREDENTIALS["region_name"],
            aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
        )

    def stop(self) -> None:
        without_transactions(self.endpoint_url, serves=True)  # the port may serve another
        if self._moto is not None:
            self._moto.shutdown()
            self._moto.server_close()
            self._moto = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None

    def __enter__(self) -> LocalDynamo:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def exports(db: LocalDynamo) -> str:
    """The shell lines that point boto3 (and the ddbtx CLI) at ``db``."""
    return (
        f"export AWS_ENDPOINT_URL_DYNAMODB={db.endpoint_url}\n"
        f"export AWS_DEFAULT_REGION={LOCAL_CREDENTIALS['region_name']}"
        f" AWS_ACCESS_KEY_ID={LOCAL_CREDENTIALS['aws_access_key_id']}"
        f" AWS_SECRET_ACCESS_KEY={LOCAL_CREDENTIALS['aws_secret_access_key']}"
    )


def serve(kind: Kind = "moto", port: int = 8000, *, out: Any = None) -> None:
    """Serve an embedded DynamoDB on ``port`` in the foreground until interrupted (Ctrl-C
    or SIGTERM), after printing the exports that point clients at it.

    Examples
    --------
    >>> serve("moto", 8000)  # doctest: +SKIP
    """
    import signal

    out = out or sys.stdout
    stop = threading.Event()
    # Both signals only set the event: a KeyboardInterrupt raised wherever the main thread
    # happens to be (inside Event.wait's lock handling, say) could leave the stop half done.
    stopping = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in stopping}
    try:
        with LocalDynamo(kind, own_process=kind == "moto", port=port) as db:
            print(
                f"# {kind} serves DynamoDB on {db.endpoint_url} until Ctrl-C; in a shell:", file=out
            )
            print(exports(db), file=out, flush=True)
            while not stop.wait(0.5):
                pass
            print(f"# {kind} on {db.endpoint_url} stopped", file=out, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve-moto"]:
        # The child of LocalDynamo("moto", own_process=True): serve until terminated.
        _linearizable_moto_server(int(sys.argv[2])).serve_forever()
    else:  # `python -m ddbtx.local [moto|dynalite] [PORT]`: as `ddbtx local`
        chosen = sys.argv[1] if len(sys.argv) > 1 else "moto"
        if chosen not in KINDS:
            sys.exit(f"usage: python -m ddbtx.local [{'|'.join(KINDS)}] [PORT]")
        serve(chosen, int(sys.argv[2]) if len(sys.argv) > 2 else 8000)
