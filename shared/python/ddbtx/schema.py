"""Names of every table key, index and protocol attribute ddbtx writes (the CDK app's too)."""

from __future__ import annotations

from typing import Final

#: Prefix of every protocol attribute on user items. User requests may not use it.
RESERVED_PREFIX: Final = "_tx:"

# --- attributes on data items while they take part in a transaction ---------
ATTR_LOCK: Final = "_tx:id"  #: id of the transaction holding the item's lock
#: epoch ms when the lock was taken: no longer written, still removed on unlock.
ATTR_LOCKED_AT: Final = "_tx:at"
ATTR_TRANSIENT: Final = "_tx:new"  #: BOOL, the item did not exist and was inserted to lock it
ATTR_APPLIED: Final = "_tx:ap"  #: request id whose write has been applied to the item
ATTR_IMAGE: Final = "_tx:img"  #: M, the item as it was before the write (in-item image)
ATTR_IMAGE_EXTERNAL: Final = "_tx:ext"  #: BOOL, the image lives in the images table
ATTR_DELETED: Final = "_tx:del"  #: BOOL, an applied delete: the item goes on commit
#: Never written: a no-op ``REMOVE`` of it lets a conditional write test a condition.
ATTR_VERDICT: Final = "_tx:chk"
#: N, the item's fence: every lock moves it on (from a random start on an item without
#: one) and every write under the lock is conditioned on the value the lock left, so a
#: late copy of an old lock moves it past every old write. It stays on the item after the
#: transaction, as a version attribute does (not in ``ITEM_ATTRIBUTES``).
ATTR_FENCE: Final = "_tx:f"

#: Sparse index of every data table on ``ATTR_LOCK`` (hash only, keys only): exactly the
#: locked items appear in it, so the sweeper finds stray locks without reading the table.
LOCK_INDEX: Final = "ddbtx-locked"


def is_held_attribute(name: str) -> bool:
    """Whether ``name`` is a protocol attribute an item carries only while a transaction
    holds it: every one but the fence, which stays (an item left with one is not done)."""
    return name.startswith(RESERVED_PREFIX) and name != ATTR_FENCE


ITEM_ATTRIBUTES: Final = (
    ATTR_LOCK,
    ATTR_LOCKED_AT,
    ATTR_TRANSIENT,
    ATTR_APPLIED,
    ATTR_IMAGE,
    ATTR_IMAGE_EXTERNAL,
    ATTR_DELETED,
)

# --- transactions table: hash id + range sk -----------------------------------
TX_PK: Final = "id"  #: transaction id (S)
#: "#" for the TX record header, "r#<rid>#<nonce>" for request bodies kept in their own row
TX_SK: Final = "sk"
TX_HEADER_SK: Final = "#"
TX_STATE: Final = "st"  #: "P" pending, "C" committed, "R" rolled back
TX_VERSION: Final = "v"  #: N, bumped by every change to the header
TX_UPDATED: Final = "ts"  #: N, epoch ms of the last change (coordinator's clock)
TX_REQUESTS: Final = "rq"  #: M, request id -> request descriptor
TX_COMPLETED: Final = "fin"  #: BOOL, every item is unlocked and every image gone
TX_TTL: Final = "ttl"  #: N, epoch seconds after which DynamoDB TTL may delete the record
TX_SWEEP_KEY: Final = "sw"  #: S, "<state>#<shard>" hash key of the sparse sweep index
#: S, id of the older transaction whose lock this pending one waits for (not a change).
TX_WAITING: Final = "wt"
#: S, id of the transaction that rolled this one back (wound-wait), for its coordinator's error.
TX_DECIDED_BY: Final = "by"
#: S, the caller's id of an exactly-once transaction (``transaction_id=``): names its alias row.
TX_CALLER_ID: Final = "cid"
#: S, the sort key of the last entry row the record accepted (its entries are in rows).
TX_TAIL: Final = "tl"

# --- alias rows (same table): the caller's id -> the transaction that carries it --------
#: Alias rows: ``id = ALIAS_PREFIX + caller's id``, ``sk = ALIAS_SK``; no TX id, cursor id,
#: header scan or sweep-index query can meet one.
ALIAS_PREFIX: Final = "@"
ALIAS_SK: Final = "@"
ALIAS_TX: Final = "tx"  #: S, internal id of the transaction the caller's id names now

#: Sparse index the sweeper queries: hash ``sw`` = "<P|C|R|F>#<shard>", range ``ts``.
SWEEP_INDEX: Final = "sweep-by-age"
SWEEP_SHARDS: Final = 8

# --- images table: hash id + range rid ---------------------------------------
IMAGE_PK: Final = "id"  #: transaction id (S)
IMAGE_SK: Final = "rid"  #: request id (S)
IMAGE_ITEM: Final = "img"  #: M, the saved item
IMAGE_TTL: Final = "ttl"

# --- a value too large for one row (images and request bodies near 400 KB) -----
#: B, one part of the serialised value; part k (1, 2, ...) lives under "<sort key>#k".
ROW_PART: Final = "z"
#: N, on the first row only: how many rows the value spans.
ROW_PARTS: Final = "zn"

# --- locks table: hash pk + range sk ------------------------------------------
LOCK_PK: Final = "pk"
LOCK_SK: Final = "sk"
LOCK_TTL: Final = "ttl"  #: N, epoch seconds; garbage collection only, never trusted for safety

STATE_PENDING: Final = "P"
STATE_COMMITTED: Final = "C"
STATE_ROLLED_BACK: Final = "R"
STATE_COMPLETED_TAG: Final = "F"
