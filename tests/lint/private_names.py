"""No module of the core reaches into another's private names.

A name with one leading underscore is its module's (or its class's) own. This fails on

- ``from .x import _name`` (or ``from ddbtx.x import _name``): a private name imported
  from another module of the core; a private *module* (``from . import _parts``) is fine;
- ``something._name``: a private attribute read off anything but ``self``, ``cls`` or
  ``super()``, unless :data:`ALLOWED` lists it.

Run: ``python -m tests.lint.private_names [package_dir]`` (default: shared/python/ddbtx).
Prints each finding as ``path:line: what`` and exits non-zero if there is any.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "python" / "ddbtx"

#: The reach-ins that remain, counted per file and expression: the count may only go down
#: (a count above it, or an expression not listed, fails; so does a count below it, so that
#: this list shrinks with every one removed). Each is left for a reason given here.
ALLOWED: dict[tuple[str, str], int] = {
    # The module's own class: its botocore event handlers, registered by count_requests.
    ("instrumentation.py", "counts._on_call"): 2,
    ("instrumentation.py", "counts._on_send"): 2,
    ("instrumentation.py", "counts._on_response"): 2,
    # botocore has no public accessor for a client's credentials.
    ("stream_reader.py", "client._request_signer"): 1,
    ("stream_reader.py", "client._request_signer._credentials"): 1,
    # ddbtx.locks: the lock client's clock, pacing and memory, shared by its lock kinds.
    ("locks/_held.py", "lock._attach"): 1,
    ("locks/_held.py", "lock_client._clock"): 1,
    ("locks/_held.py", "self._lc._wall"): 1,
    ("locks/_line.py", "lc._clock"): 3,
    ("locks/_line.py", "lc._pace"): 1,
    ("locks/_line.py", "lc._polls"): 1,
    ("locks/_line.py", "lc._wall"): 2,
    ("locks/_line.py", "self.lc._wall"): 1,
    ("locks/fifo.py", "fifo._keep"): 1,
    ("locks/fifo.py", "lock._confirm"): 1,
    ("locks/fifo.py", "lock._extra_names"): 1,
    ("locks/fifo.py", "lock._extra_values"): 1,
    ("locks/lease.py", "lc._clock"): 2,
    ("locks/lease.py", "lc._held"): 1,
    ("locks/lease.py", "lc._remember"): 2,
    ("locks/lease.py", "lock._confirm"): 1,
    ("locks/lease.py", "lock._next"): 1,
    ("locks/lease.py", "self._lc._wall"): 1,
    ("locks/lease.py", "self.lc._grant"): 1,
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _module_of(path: Path, package: Path) -> list[str]:
    """The dotted module path of ``path`` inside ``package`` (``ddbtx`` first)."""
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_module(dotted: list[str], package: Path) -> bool:
    inner = package.joinpath(*dotted[1:])
    return inner.with_suffix(".py").is_file() or (inner / "__init__.py").is_file()


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def findings(package: Path = PACKAGE) -> tuple[list[str], Counter[tuple[str, str]], dict]:
    """Private imports (always wrong), and reach-ins by (file, expression) with their lines."""
    imports: list[str] = []
    reach: Counter[tuple[str, str]] = Counter()
    lines: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        module = _module_of(path, package)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module if is_package else module[:-1]
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    source = [*base, *(node.module.split(".") if node.module else [])]
                elif node.module and node.module.split(".")[0] == package.name:
                    source = node.module.split(".")
                else:
                    continue
                for alias in node.names:
                    if _private(alias.name) and not _is_module([*source, alias.name], package):
                        imports.append(
                            f"{rel}:{node.lineno}: imports the private name {alias.name} "
                            f"from {'.'.join(source)}"
                        )
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if _is_self(node.value):
                    continue
                key = (rel, ast.unparse(node))
                reach[key] += 1
                lines.setdefault(key, []).append(f"{rel}:{node.lineno}")
    return imports, reach, lines


def main(argv: list[str]) -> int:
    package = Path(argv[0]).resolve() if argv else PACKAGE
    imports, reach, lines = findings(package)
    problems = list(imports)
    for key, count in sorted(reach.items()):
        allowed = ALLOWED.get(key, 0)
        if count > allowed:
            where = ", ".join(lines[key])
            problems.append(
                f"{where}: reaches into a private name: {key[1]} "
                f"({count} found, {allowed} allowed in tests/lint/private_names.py)"
            )
    for key, allowed in sorted(ALLOWED.items()):
        if reach.get(key, 0) < allowed:
            problems.append(
                f"{key[0]}: {key[1]} is allowed {allowed} times but found "
                f"{reach.get(key, 0)}: lower its count in ALLOWED (tests/lint/private_names.py)"
            )
    for problem in problems:
        print(problem)
    remaining = sum(min(count, ALLOWED.get(key, 0)) for key, count in reach.items())
    print(
        f"private names: {len(problems)} problem(s); {remaining} allowed reach-in(s) remain",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
