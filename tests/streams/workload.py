"""Transactions that make a data table's stream show every protocol step, one step at a time.

Each step completes before the next begins (commit, roll back, or a rescue), so a
snapshot of the table after each step holds exactly the committed values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ddbtx import ConditionalCheckFailedError, TransactionManager, TransactionRolledBackError
from ddbtx import schema as s

#: Items of over 64 KB keep their image in the images table, not in the item.
LARGE = "x" * 100_000


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def add(tx: Any, table: str, pk: str, amount: int, *, at_least: int | None = None) -> None:
    """``balance += amount``; with ``at_least``, only while the balance is at least that."""
    params: dict[str, Any] = {
        "TableName": table,
        "Key": key(pk),
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": str(amount)}},
    }
    if at_least is not None:
        params["ConditionExpression"] = "balance >= :min"
        params["ExpressionAttributeValues"][":min"] = {"N": str(at_least)}
    tx.update_item(**params)


def put(tx: Any, table: str, pk: str, balance: int, **extra: str) -> None:
    item = {**key(pk), "balance": {"N": str(balance)}}
    item.update({name: {"S": value} for name, value in extra.items()})
    tx.put_item(TableName=table, Item=item)


def delete(tx: Any, table: str, pk: str) -> None:
    tx.delete_item(TableName=table, Key=key(pk))


def transfer(tx: Any, table: str, source: str, target: str, amount: int) -> None:
    add(tx, table, source, -amount, at_least=amount)
    add(tx, table, target, amount)


class Workload:
    """Runs steps on one data table and keeps the ids of the transactions that committed."""

    def __init__(
        self,
        ddb: Any,
        table: str,
        make_tm: Callable[..., TransactionManager],
        after_step: Callable[[], None],
    ) -> None:
        self.ddb, self.table, self.make_tm = ddb, table, make_tm
        self.after_step = after_step
        self.committed: set[str] = set()
        self.rolled_back: set[str] = set()
        #: Committed transactions whose writes left every value as it was.
        self.unchanging: set[str] = set()

    def plain_put(self, pk: str, balance: int, **extra: str) -> None:
        item = {**key(pk), "balance": {"N": str(balance)}}
        item.update({name: {"S": value} for name, value in extra.items()})
        self.ddb.put_item(TableName=self.table, Item=item)
        self.after_step()

    def run(self, work: Callable[[Any], None], *, ending: str = "commit") -> str:
        """``work(tx)`` then ``ending`` (commit or rollback) on a fresh coordinator; a failed
        condition rolls the transaction back. Returns the transaction's id."""
        tx = self.make_tm().begin()
        try:
            work(tx)
            getattr(tx, ending)()
        except ConditionalCheckFailedError:
            tx.rollback()
        self.record_outcome(tx.id, tx.state)
        return tx.id

    def record_outcome(self, tx_id: str, state: str) -> None:
        (self.committed if state == s.STATE_COMMITTED else self.rolled_back).add(tx_id)
        self.after_step()


def run_everything(w: Workload) -> None:
    """Commits, roll backs, failed conditions, wounds, several writes per item, large items,
    read locks, a write that changes nothing, and plain writes in between."""
    t = w.table
    for pk in "abcdefgh":
        w.plain_put(pk, 100)
    w.ddb.update_item(
        TableName=t, Key=key("h"), UpdateExpression="SET note = :v",
        ExpressionAttributeValues={":v": {"S": "plain"}},
    )  # fmt: skip
    w.after_step()
    w.ddb.delete_item(TableName=t, Key=key("h"))
    w.after_step()
    # transfers: committed, rolled back, and one whose condition fails after a write applied
    w.run(lambda tx: transfer(tx, t, "a", "b", 10))
    w.run(lambda tx: transfer(tx, t, "a", "b", 10), ending="rollback")
    w.run(lambda tx: (add(tx, t, "b", 1), add(tx, t, "a", -1000, at_least=1000)))
    # inserts and deletes, committed and rolled back
    w.run(lambda tx: put(tx, t, "n1", 1))
    w.run(lambda tx: put(tx, t, "n2", 2), ending="rollback")
    w.run(lambda tx: delete(tx, t, "c"))
    w.run(lambda tx: delete(tx, t, "d"), ending="rollback")
    # read locks, on an item and on a missing one, next to a write
    reads = (tx_get(t, "b"), tx_get(t, "missing"))
    w.run(lambda tx: (reads[0](tx), reads[1](tx), add(tx, t, "e", 5)))
    w.run(lambda tx: (reads[0](tx), reads[1](tx), add(tx, t, "e", 5)), ending="rollback")
    # several writes per item, in both outcomes
    for ending in ("rollback", "commit"):
        w.run(lambda tx: several_writes(tx, t), ending=ending)
    # a write that changes nothing: committed, it is no change
    w.unchanging.add(w.run(lambda tx: put(tx, t, "b", balance_of(w, "b"))))
    # large items: the image is kept in the images table
    w.plain_put("big", 1, blob=LARGE)
    w.run(lambda tx: add(tx, t, "big", 1))
    w.run(lambda tx: add(tx, t, "big", 1), ending="rollback")
    w.run(lambda tx: (add(tx, t, "big", 1), delete(tx, t, "big")))
    w.run(lambda tx: put(tx, t, "big2", 1, blob=LARGE))
    # a wound: the older transaction rolls the younger holder back and commits
    wound(w)


def tx_get(table: str, pk: str) -> Callable[[Any], None]:
    def read(tx: Any) -> None:
        tx.get_item(TableName=table, Key=key(pk))

    return read


def several_writes(tx: Any, t: str) -> None:
    add(tx, t, "a", 1)
    add(tx, t, "a", 2)  # update, update
    put(tx, t, "b", 7)
    add(tx, t, "b", 1)  # put, update
    delete(tx, t, "f")
    put(tx, t, "f", 60)  # delete, put
    put(tx, t, "n3", 3)
    delete(tx, t, "n3")  # an insert deleted again: nothing
    delete(tx, t, "g")
    add(tx, t, "g", 4)  # delete, then update of the absent item (cleared to its key)
    put(tx, t, "n4", 4)
    add(tx, t, "n4", 4)  # insert, update


def balance_of(w: Workload, pk: str) -> int:
    item = w.ddb.get_item(TableName=w.table, Key=key(pk), ConsistentRead=True)["Item"]
    return int(item["balance"]["N"])


def wound(w: Workload) -> None:
    """An older transaction needs the item a younger one holds, and wounds it."""
    t = w.table
    older = w.make_tm(wound_patience=0.5).begin()
    younger = w.make_tm().begin()
    add(younger, t, "e", 100)
    add(younger, t, "a", 100)
    add(older, t, "a", 1)  # waits out its patience, then rolls the younger back
    older.commit()
    with contextlib.suppress(TransactionRolledBackError):
        younger.commit()
    w.committed.add(older.id)
    w.rolled_back.add(younger.id)
    assert younger.state == s.STATE_ROLLED_BACK
    w.after_step()
