"""A schedule: who takes part, what each one does, one fault, and how calls are ordered.

Its one-line text form (``spec``) is what a failure prints and ``--replay`` reads::

    seed=7 pol=pct3 mw=4 c0=ua,pb:commit c1=:rollback c2=gc,db:commit/w sw=1 rc=0 aio=c1.c2
    fault=c1:lost@3

``c<i>=<requests>:<ending>``: requests are an op letter (``p``ut, ``u``pdate,
``d``elete, ``g``et) and an item (``a``, ``b``, ``c``); ``/w`` sends the
writes in one ``write_all``. ``c0`` begins the transaction, the others
``resume`` it. ``sw``: a sweeper pass, ``rc``: an operator's ``break_lock`` on each
item, then ``recover``. ``aio=``: the coordinators whose calls go out through the
asyncio client (the others' through boto3; ``-``: none). ``fault=<owner>:<kind>@<call>``:
one of :data:`FAULT_KINDS`. ``pick=`` (systematic mode) forces the first choices.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

#: Fault kinds, in the issue's words: crash before, crash after (applied, answer lost),
#: answer lost and the SDK resends, pause past the sweeper's rollback age; a stall
#: until another participant is about to mark the record completed (that one dies
#: there, and the stalled one's late call lands on completed items); and late copies
#: (issue 34): as the participant reaches its call, one to three writes any party sent
#: before arrive again, verbatim, in any order (one may come twice).
FAULT_KINDS = ("before", "after", "lost", "pause", "stall", "copy")

ITEMS = ("a", "b", "c")
OPS = {"p": "put", "u": "update", "d": "delete", "g": "get"}
ENDINGS = ("commit", "rollback")
POLICIES = ("rand", "pct2", "pct3", "pct4")
#: Highest call index a random fault aims at (the later ones mostly do not fire).
MAX_FAULT_CALL = 14
#: The kinds a random schedule draws from; a ``stall`` replaces a drawn ``pause``...
RANDOM_KINDS = tuple(kind for kind in FAULT_KINDS if kind != "stall")
#: ...this often.
STALLS = 0.5
STALL_SALT = 0x57A11
#: Each coordinator's calls go out through the asyncio client this often (drawn apart
#: from the schedule's other choices, as stalls are).
AIO = 0.5
AIO_SALT = 0xA10
#: The share of random schedules whose records keep their entries in rows (issue 22).
ROWS = 0.5
ROWS_SALT = 0x2035


@dataclass(frozen=True)
class Fault:
    owner: str  #: participant it hits
    kind: str
    at: int  #: its call index (0-based; a resent attempt is the same call)

    def spec(self) -> str:
        return f"{self.owner}:{self.kind}@{self.at}"

    @classmethod
    def parse(cls, text: str) -> Fault:
        owner, rest = text.split(":")
        kind, at = rest.split("@")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, not {kind!r}")
        return cls(owner, kind, int(at))


@dataclass(frozen=True)
class Script:
    requests: tuple[str, ...]  #: e.g. ("ua", "pb")
    ending: str = "commit"
    batch: bool = False  #: writes go in one write_all

    def spec(self) -> str:
        return ",".join(self.requests) + ":" + self.ending + ("/w" if self.batch else "")

    @classmethod
    def parse(cls, text: str) -> Script:
        body, _, ending = text.partition(":")
        ending, _, flags = ending.partition("/")
        requests = tuple(r for r in body.split(",") if r)
        for r in requests:
            if len(r) != 2 or r[0] not in OPS or r[1] not in ITEMS:
                raise ValueError(f"request must be one of {list(OPS)} + one of {ITEMS}: {r!r}")
        if ending not in ENDINGS:
            raise ValueError(f"ending must be one of {ENDINGS}, not {ending!r}")
        return cls(requests, ending, flags == "w")


@dataclass(frozen=True)
class Schedule:
    seed: int
    policy: str
    workers: int
    scripts: tuple[Script, ...]
    sweeper: bool = False
    recover: bool = False
    fault: Fault | None = None
    pick: tuple[int, ...] = field(default=())
    aio: tuple[str, ...] = ()  #: coordinators on the asyncio transport
    rows: bool = False  #: every add after the record's creation goes to entry rows

    @property
    def owners(self) -> list[str]:
        extra = (["sw"] if self.sweeper else []) + (["rc"] if self.recover else [])
        return [f"c{i}" for i in range(len(self.scripts))] + extra

    def spec(self) -> str:
        parts = [f"seed={self.seed}", f"pol={self.policy}", f"mw={self.workers}"]
        parts += [f"c{i}={s.spec()}" for i, s in enumerate(self.scripts)]
        parts += [f"sw={int(self.sweeper)}", f"rc={int(self.recover)}"]
        parts.append("aio=" + (".".join(self.aio) or "-"))
        parts.append(f"fault={self.fault.spec() if self.fault else '-'}")
        if self.pick:
            parts.append("pick=" + ".".join(map(str, self.pick)))
        if self.rows:
            parts.append("rows=1")
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        fields = dict(part.split("=", 1) for part in text.split())
        scripts = []
        while f"c{len(scripts)}" in fields:
            scripts.append(Script.parse(fields[f"c{len(scripts)}"]))
        if not scripts:
            raise ValueError(f"a schedule needs c0=...: {text!r}")
        fault = fields.get("fault", "-")
        pick = fields.get("pick", "")
        return cls(
            seed=int(fields["seed"]),
            policy=fields.get("pol", "rand"),
            workers=int(fields.get("mw", "1")),
            scripts=tuple(scripts),
            sweeper=fields.get("sw", "0") == "1",
            recover=fields.get("rc", "0") == "1",
            fault=None if fault == "-" else Fault.parse(fault),
            pick=tuple(int(p) for p in pick.split(".") if p),
            aio=tuple(o for o in fields.get("aio", "-").split(".") if o != "-"),
            rows=fields.get("rows", "0") == "1",
        )


def _script(rng: random.Random, least: int) -> Script:
    requests: list[str] = []
    for _ in range(rng.randint(least, 2)):
        requests.append(rng.choice("uuppdg") + rng.choice(ITEMS))
    writes = [r for r in requests if r[0] != "g"]
    ending = "commit" if rng.random() < 0.75 else "rollback"
    return Script(tuple(requests), ending, len(writes) >= 2 and rng.random() < 0.4)


def random_schedule(rng: random.Random) -> Schedule:
    """2-4 coordinators with random scripts, maybe a sweeper and a recover, one fault."""
    n = rng.choice((2, 2, 3, 3, 4))
    scripts = tuple(_script(rng, 1 if i == 0 else 0) for i in range(n))
    schedule = Schedule(
        seed=rng.getrandbits(32),
        policy=rng.choice(POLICIES),
        workers=rng.choice((1, 1, 4)),
        scripts=scripts,
        sweeper=rng.random() < 0.4,
        recover=rng.random() < 0.2,
    )
    on_aio = random.Random(schedule.seed ^ AIO_SALT)
    aio = tuple(f"c{i}" for i in range(n) if on_aio.random() < AIO)
    # Drawn apart from ``rng`` too, so a seed's other choices stay as they were.
    rows = random.Random(schedule.seed ^ ROWS_SALT).random() < ROWS
    schedule = replace(schedule, aio=aio, rows=rows)
    kind = rng.choice(RANDOM_KINDS)
    if kind == "pause" and rng.random() < 0.7:
        # A pause past the rollback age matters when someone rolls back meanwhile.
        schedule = replace(schedule, sweeper=True)
    if kind == "pause" and random.Random(schedule.seed ^ STALL_SALT).random() < STALLS:
        # Some pauses are stalls instead, drawn apart from ``rng``: every other schedule
        # of a seed stays as it was before stalls existed.
        kind = "stall"
    owners = [o for o in schedule.owners for _ in range(3 if o.startswith("c") else 1)]
    # Coordinators make 5-20 calls: aim at the early ones more often than the late ones.
    at = min(rng.randrange(MAX_FAULT_CALL), rng.randrange(MAX_FAULT_CALL))
    return replace(schedule, fault=Fault(rng.choice(owners), kind, at))


def smaller(schedule: Schedule) -> list[Schedule]:
    """Candidate simplifications, most drastic first (for shrinking a failure)."""
    out: list[Schedule] = []
    s = schedule
    if s.fault is not None:
        out.append(replace(s, fault=None))
    if s.recover:
        out.append(replace(s, recover=False, fault=_refit(s.fault, "rc")))
    if s.sweeper:
        out.append(replace(s, sweeper=False, fault=_refit(s.fault, "sw")))
    for i in range(len(s.scripts) - 1, 0, -1):
        out.append(_drop_coordinator(s, i))
    for i, script in enumerate(s.scripts):
        for j in range(len(script.requests)):
            if i == 0 and len(script.requests) == 1:
                continue
            fewer = script.requests[:j] + script.requests[j + 1 :]
            out.append(_with_script(s, i, replace(script, requests=fewer)))
        if script.batch:
            out.append(_with_script(s, i, replace(script, batch=False)))
    if s.workers > 1:
        out.append(replace(s, workers=1))
    if s.aio:
        out.append(replace(s, aio=()))
    if s.rows:
        out.append(replace(s, rows=False))
    if s.fault is not None and s.fault.at > 0:
        out.append(replace(s, fault=replace(s.fault, at=s.fault.at - 1)))
    return [c for c in out if c != s]


def _refit(fault: Fault | None, removed: str) -> Fault | None:
    return None if fault is not None and fault.owner == removed else fault


def _with_script(s: Schedule, i: int, script: Script) -> Schedule:
    scripts = (*s.scripts[:i], script, *s.scripts[i + 1 :])
    return replace(s, scripts=scripts)


def _drop_coordinator(s: Schedule, i: int) -> Schedule:
    scripts = s.scripts[:i] + s.scripts[i + 1 :]
    fault = s.fault
    if fault is not None and fault.owner.startswith("c"):
        n = int(fault.owner[1:])
        if n == i:
            fault = None
        elif n > i:
            fault = replace(fault, owner=f"c{n - 1}")
    aio = tuple(o if int(o[1:]) < i else f"c{int(o[1:]) - 1}" for o in s.aio if o != f"c{i}")
    return replace(s, scripts=scripts, fault=fault, aio=aio)
