"""A list-append history checker (after Elle's, Kingsbury and Alvaro, VLDB 2020), in plain Python.

A history is a list of transactions, each a list of micro-operations on keys
whose values are lists: ``append(k, v)`` with globally unique ``v``, and
``read(k) -> [v1, v2, ...]``. Because every read returns the whole list, it
reveals the order of all earlier appends, which lets the checker rebuild each
key's version order and then the dependency graph between transactions:

``ww``  T1 appended the version T2's append directly follows;
``wr``  T2 read a list whose last (foreign) element T1 appended;
``rw``  T1 read a list and T2 appended the element that comes next.

Reported anomalies (Adya's names): ``G0`` (a cycle of ww edges), ``G1c`` (a
cycle of ww and wr edges), ``G-single`` (a cycle with exactly one rw edge: read
skew, a lost update), ``G2`` (a cycle needing more rw edges: write skew),
``G1a`` (a read of an aborted append), ``G1b`` (a read of an intermediate
version), plus ``incompatible-order`` (two reads that are not prefixes of one
another), ``internal`` (a transaction not seeing its own append),
``duplicate-append`` (a value twice in one list: an append applied twice),
``duplicate-value`` (the workload appended a value twice: a harness bug),
``garbage-read`` (a value nobody appended) and, against the final state read
after recovery, ``lost-append`` (an acknowledged append missing),
``not-prefix-of-final`` (a read that the final value does not start with) and
``partial`` (only some of an unacknowledged transaction's appends survived).

Transactions with ``isolation="committed"`` (reads at read committed) are
checked for G1 only: their rw edges are left out, since read committed allows
G-single and G2. ``Txn.uncertain`` names appends that were in flight when the
transaction's coordinator crashed and another one later committed it: they
count where some read or the final state shows them, and are dropped otherwise.

Examples
--------
>>> t1 = Txn(1, [append("x", 1), read("y", [2])], "ok")
>>> t2 = Txn(2, [append("y", 2), read("x", [1])], "ok")
>>> [a.kind for a in check([t1, t2])]       # each read the other's write: circular
['G1c']
>>> t3 = Txn(3, [read("x", []), append("y", 3)], "ok")
>>> t4 = Txn(4, [read("y", []), append("x", 4)], "ok")
>>> [a.kind for a in check([t3, t4])]       # write skew: each missed the other's write
['G2']
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

OK, FAIL, INFO = "ok", "fail", "info"
SERIALIZABLE, COMMITTED = "serializable", "committed"


@dataclass(frozen=True)
class MicroOp:
    f: str  # "r" or "append"
    key: str
    value: int | tuple[int, ...] | None  # append: the value; read: the list seen


def append(key: str, value: int) -> MicroOp:
    return MicroOp("append", key, value)


def read(key: str, values: Iterable[int] | None) -> MicroOp:
    return MicroOp("r", key, None if values is None else tuple(values))


@dataclass
class Txn:
    """One transaction: its micro-ops as completed, and how it ended (ok, fail or info)."""

    id: int
    ops: list[MicroOp]
    status: str
    isolation: str = SERIALIZABLE
    process: int = 0
    uncertain: frozenset[int] = frozenset()
    note: str = ""  #: how it ran (API, level, ending), for the report


@dataclass(frozen=True)
class Anomaly:
    kind: str
    txns: tuple[int, ...]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} among txns {list(self.txns)}: {self.detail}"


@dataclass
class _Graph:
    edges: dict[int, dict[int, set[str]]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, a: int, b: int, kind: str) -> None:
        if a != b:
            self.edges[a].setdefault(b, set()).add(kind)

    def restricted(self, kinds: set[str]) -> dict[int, list[int]]:
        return {
            a: sorted(b for b, ks in out.items() if ks & kinds) for a, out in self.edges.items()
        }


def _sccs(adj: dict[int, list[int]]) -> list[list[int]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    out: list[list[int]] = []
    counter = 0
    nodes = set(adj) | {b for bs in adj.values() for b in bs}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on.add(node)
            succ = adj.get(node, [])
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def _cycle(adj: dict[int, list[int]], comp: list[int]) -> list[int]:
    """One explicit cycle inside a strongly connected component (for the report)."""
    members = set(comp)
    start = comp[0]
    prev: dict[int, int] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in adj.get(node, []):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if nxt in members and nxt not in prev:
                    prev[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return comp


class _Checker:
    def __init__(self, history: list[Txn], final: dict[str, tuple[int, ...]] | None) -> None:
        self.history = history
        self.final = final
        self.by_id = {t.id: t for t in history}
        self.anomalies: list[Anomaly] = []
        self.writer: dict[int, tuple[int, str]] = {}
        self.committed: set[int] = set()

    def flag(self, kind: str, txns: Iterable[int], detail: str) -> None:
        self.anomalies.append(Anomaly(kind, tuple(txns), detail))

    def run(self) -> list[Anomaly]:
        observed = self._observed_values()
        self._drop_unobserved_uncertain(observed)
        self._writers()
        self._internal()
        self._duplicates()
        self.committed = {
            t.id
            for t in self.history
            if t.status == OK or (t.status == INFO and any(v in observed for v in self._appends(t)))
        }
        self._aborted_and_intermediate_reads()
        orders = self._orders()
        if self.final is not None:
            self._against_final()
        self._cycles(orders)
        return self.anomalies

    @staticmethod
    def _appends(t: Txn) -> list[int]:
        return [op.value for op in t.ops if op.f == "append" and isinstance(op.value, int)]

    def _drop_unobserved_uncertain(self, observed: set[int]) -> None:
        """An in-flight append that nothing shows was not applied: it leaves the history."""
        for t in self.history:
            dropped = t.uncertain - observed
            if dropped:
                t.ops = [op for op in t.ops if not (op.f == "append" and op.value in dropped)]

    def _writers(self) -> None:
        for t in self.history:
            for op in t.ops:
                if op.f == "append" and isinstance(op.value, int):
                    if op.value in self.writer:
                        self.flag("duplicate-value", [self.writer[op.value][0], t.id], str(op))
                    self.writer[op.value] = (t.id, op.key)

    def _duplicates(self) -> None:
        """No value twice in one list: each append is applied once."""
        lists = [(op.key, op.value, [t.id]) for t, op in self._reads()]
        lists += [(key, values, []) for key, values in (self.final or {}).items()]
        for key, values, who in lists:
            assert isinstance(values, tuple)
            twice = sorted(v for v, n in Counter(values).items() if n > 1)
            if twice:
                writers = [self.writer[v][0] for v in twice if v in self.writer]
                self.flag("duplicate-append", [*writers, *who], f"{key}: {twice} twice in {values}")

    def _reads(self, statuses: tuple[str, ...] = (OK,)) -> Iterable[tuple[Txn, MicroOp]]:
        for t in self.history:
            if t.status in statuses:
                for op in t.ops:
                    if op.f == "r" and isinstance(op.value, tuple):
                        yield t, op

    def _observed_values(self) -> set[int]:
        seen = {v for _, op in self._reads() for v in op.value or ()}  # type: ignore[union-attr]
        for values in (self.final or {}).values():
            seen.update(values)
        return seen

    def _internal(self) -> None:
        """A transaction sees its own appends, and its reads of a key only grow."""
        for t in self.history:
            if t.status != OK:
                continue
            state: dict[str, tuple[int, ...]] = {}
            own: dict[str, int] = {}
            for op in t.ops:
                if op.f == "r" and isinstance(op.value, tuple):
                    expect = state.get(op.key, ())
                    ends_own = op.key not in own or op.value[-1:] == (own[op.key],)
                    if op.value[: len(expect)] != expect or not ends_own:
                        self.flag("internal", [t.id], f"{op} does not extend {expect}")
                    state[op.key] = op.value
                elif op.f == "append" and isinstance(op.value, int):
                    own[op.key] = op.value
                    if op.key in state:
                        state[op.key] = (*state[op.key], op.value)

    def _aborted_and_intermediate_reads(self) -> None:
        last_append: dict[tuple[int, str], int] = {}
        for t in self.history:
            for op in t.ops:
                if op.f == "append" and isinstance(op.value, int):
                    last_append[(t.id, op.key)] = op.value
        for t, op in self._reads():
            assert isinstance(op.value, tuple)
            for v in op.value:
                w = self.writer.get(v)
                if w is None:
                    self.flag("garbage-read", [t.id], f"{op}: value {v} was never appended")
                elif w[0] != t.id and self.by_id[w[0]].status == FAIL:
                    self.flag("G1a", [w[0], t.id], f"{op} includes aborted append {v}")
            foreign = self._external(t, op)
            if foreign:
                w = self.writer.get(foreign[-1])
                if w and last_append.get((w[0], op.key)) != foreign[-1]:
                    self.flag("G1b", [w[0], t.id], f"{op} ends at an intermediate append")

    def _external(self, t: Txn, op: MicroOp) -> tuple[int, ...]:
        """The read with the transaction's own trailing appends removed: what it observed."""
        values = tuple(op.value or ())  # type: ignore[arg-type]
        while values and self.writer.get(values[-1], (None,))[0] == t.id:
            values = values[:-1]
        return values

    def _orders(self) -> dict[str, tuple[int, ...]]:
        """Each key's version order: the longest read, of which every other read is a prefix."""
        lists: dict[str, list[tuple[tuple[int, ...], int | None]]] = defaultdict(list)
        for t, op in self._reads():
            lists[op.key].append((op.value, t.id))  # type: ignore[arg-type]
        for key, values in (self.final or {}).items():
            lists[key].append((values, None))
        orders: dict[str, tuple[int, ...]] = {}
        for key, seen in lists.items():
            longest = max(seen, key=lambda p: len(p[0]))[0]
            for values, tid in seen:
                if longest[: len(values)] != values:
                    who = [x for x in (tid,) if x is not None]
                    self.flag("incompatible-order", who, f"{key}: {values} vs {longest}")
            orders[key] = longest
        return orders

    def _against_final(self) -> None:
        assert self.final is not None
        for t, op in self._reads():
            final = self.final.get(op.key)
            if final is not None and final[: len(op.value or ())] != op.value:
                self.flag("not-prefix-of-final", [t.id], f"{op} vs final {final}")
        present = {v for values in self.final.values() for v in values}
        for t in self.history:
            mine = self._appends(t)
            if not mine:
                continue
            kept = [v for v in mine if v in present]
            if t.status == OK and len(kept) < len(mine):
                missing = sorted(set(mine) - set(kept))
                self.flag("lost-append", [t.id], f"acknowledged appends {missing} are gone")
            elif t.status == FAIL and kept:
                self.flag("G1a", [t.id], f"aborted appends {kept} survived")
            elif t.status == INFO and 0 < len(kept) < len(mine):
                self.flag("partial", [t.id], f"only {kept} of {mine} survived")

    def _cycles(self, orders: dict[str, tuple[int, ...]]) -> None:
        graph = _Graph()
        live = self.committed
        for order in orders.values():
            writers = [self.writer[v][0] for v in order if v in self.writer]
            for a, b in itertools.pairwise(writers):
                if a in live and b in live:
                    graph.add(a, b, "ww")
        unplaced: dict[str, set[int]] = defaultdict(set)
        for v, (w, key) in self.writer.items():
            if w in live and v not in orders.get(key, ()):
                unplaced[key].add(w)
        for t, op in self._reads():
            if t.id not in live:
                continue
            seen = self._external(t, op)
            order = orders.get(op.key, ())
            source = self.writer.get(seen[-1]) if seen else None
            if source and source[0] in live:
                graph.add(source[0], t.id, "wr")
            if t.isolation == COMMITTED:
                continue  # read committed permits rw cycles
            nxt = [v for v in order[len(seen) :] if self.writer.get(v, (t.id,))[0] != t.id]
            if nxt and self.writer[nxt[0]][0] in live:
                graph.add(t.id, self.writer[nxt[0]][0], "rw")
            # Committed appends no read placed are still after this read's version.
            for later in unplaced.get(op.key, ()):
                graph.add(t.id, later, "rw")
        self._report_cycles(graph)

    def _report_cycles(self, graph: _Graph) -> None:
        """G0, then G1c, then for cycles that need an rw edge G-single or G2."""
        reported: list[set[int]] = []
        for kind, kinds in (("G0", {"ww"}), ("G1c", {"ww", "wr"}), ("G2", {"ww", "wr", "rw"})):
            adj = graph.restricted(kinds)
            for comp in _sccs(adj):
                if any(set(comp) <= seen for seen in reported):
                    continue
                reported.append(set(comp))
                cycle = _single_rw_cycle(graph, comp) if kind == "G2" else None
                if cycle is not None:
                    kind = "G-single"
                else:
                    cycle = _cycle(adj, comp)
                self.flag(kind, comp, "cycle " + _describe(graph, cycle))


def _single_rw_cycle(graph: _Graph, comp: list[int]) -> list[int] | None:
    """A cycle in ``comp`` with exactly one rw edge, if there is one (G-single)."""
    members = set(comp)
    dependencies = graph.restricted({"ww", "wr"})
    for a in comp:
        for b, kinds in graph.edges.get(a, {}).items():
            if "rw" not in kinds or b not in members:
                continue
            back = _path(dependencies, b, a, members)
            if back is not None:
                return [a, *back]
    return None


def _path(adj: dict[int, list[int]], start: int, goal: int, members: set[int]) -> list[int] | None:
    """The shortest path from ``start`` to ``goal`` inside ``members`` (both ends included)."""
    prev: dict[int, int] = {start: start}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            if node == goal:
                path = [node]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1]
            for nxt in adj.get(node, []):
                if nxt in members and nxt not in prev:
                    prev[nxt] = node
                    following.append(nxt)
        frontier = following
    return None


def _describe(graph: _Graph, cycle: list[int]) -> str:
    return ", ".join(
        f"{a} -{'/'.join(sorted(graph.edges[a][b]))}-> {b}" for a, b in itertools.pairwise(cycle)
    )


def check(history: list[Txn], final: dict[str, tuple[int, ...]] | None = None) -> list[Anomaly]:
    """Every anomaly in a list-append history (``final``: each key's list after recovery)."""
    return _Checker(history, final).run()
