"""The command line as click reads it: global options may come after the subcommand too."""

from __future__ import annotations

from typing import Final

#: The global options that take a value, as ``ddbtx --help`` lists them.
VALUED: Final = (
    "--endpoint-url",
    "--region",
    "--transactions-table",
    "--images-table",
    "--locks-table",
    "--data-tables",
)
#: The global flags (``--version`` and ``--help`` after a subcommand are the subcommand's).
FLAGS: Final = ("--json", "--verbose", "-v")


def hoist_globals(argv: list[str]) -> list[str]:
    """``argv`` with each global option given after the subcommand moved before it, where
    click reads a group's options: ``inspect X --region r`` runs as ``--region r inspect X``.
    Nothing after ``--`` moves.

    Examples
    --------
    >>> hoist_globals(["inspect", "tx-1", "--region", "eu-west-1", "--json"])
    ['--region', 'eu-west-1', '--json', 'inspect', 'tx-1']
    """
    head: list[str] = []  # the global options given before the subcommand, with values
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        width = 2 if argv[i] in VALUED else 1  # "--region=r" is one token
        head += argv[i : i + width]
        i += width
    moved: list[str] = []
    tail: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            tail += argv[i:]
            break
        if arg in VALUED and i + 1 < len(argv):
            moved += argv[i : i + 2]
            i += 2
            continue
        if ("=" in arg and arg.split("=", 1)[0] in VALUED) or arg in FLAGS:
            moved.append(arg)
        else:
            tail.append(arg)
        i += 1
    return head + moved + tail
