"""Erasure: remove a thread from the store for good, with a receipt that proves it.

:func:`plan_erasure` reads what the store holds of the thread (checkpoints and their bytes,
pending writes, the ledger record and its mark and lease, the park, the outbox rows sent,
pending and quarantined) without writing; :func:`apply_erasure` tombstones the thread and
deletes all of it in one step of the backend (``Store._erase``), so a run still writing to the
thread is refused from that instant, and returns an :class:`ErasureReceipt`. Pending and
quarantined outbox rows are dropped with the rest and listed in the receipt: they are never
sent. Erasing an erased thread removes nothing more and says so.

The receipt never holds the thread id: the tombstone's keyed hash names the thread. It says
what erasure could not reach from this store: stores a run of the thread used for itself (a
per-run provider), archives and backups, other machines' stores; the plane's part is added by
:mod:`durability.replication.erasure`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from durability._util import redact_url
from durability.errors import CapabilityError
from durability.model import Tombstone
from durability.stores.ids import check_id, check_thread

if TYPE_CHECKING:
    from durability.stores.base import Store

#: What erasure from one store cannot reach, whatever the store holds.
UNREACHABLE = (
    "stores a run of this thread used for itself (a per-run provider: an agent's or a flow's "
    "own checkpoint store); erase the thread there too: durability threads erase URL THREAD",
    "archives, backups and snapshots of this store",
    "other machines' stores that restored or copied this thread",
)


#: The plane's part of a receipt when no plane was asked.
NOT_ASKED = "not asked: no plane is configured and the store does not replicate to one"


@dataclass(frozen=True, slots=True)
class ErasurePlan:
    """What erasing the thread would remove (a pure read of the store)."""

    thread_id: str
    tombstone: str
    already: Tombstone | None
    checkpoints: int
    bytes: int
    pending_writes: int
    run_ids: tuple[str, ...]
    ledger_record: bool
    finished_mark: bool
    live_lease: bool
    park: bool
    outbox_sent: int
    outbox_pending: tuple[str, ...]
    outbox_quarantined: tuple[tuple[str, str], ...]

    @property
    def empty(self) -> bool:
        """Whether the store holds nothing of the thread."""
        return not (self.checkpoints or self.pending_writes or self.ledger_record or self.park)


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    """What an erasure removed where, what it could not reach, and the tombstone that stays.

    ``store`` counts what left this store; ``outbox`` the replication rows dropped (pending
    and quarantined ones listed by checkpoint id, never sent); ``plane`` what the plane was
    asked and answered (``not asked`` until replication adds it); ``already_erased`` is true
    when the thread was erased before (nothing more was removed, or only what a reopen let in).
    """

    tombstone: str
    erased_at: datetime
    erased_by: str
    already_erased: bool
    store: dict[str, Any]
    outbox: dict[str, Any]
    plane: dict[str, Any] = field(default_factory=lambda: {"status": NOT_ASKED})
    unreachable: tuple[str, ...] = UNREACHABLE

    def to_dict(self) -> dict[str, Any]:
        """The receipt as JSON-ready data (times as ISO 8601)."""
        data = asdict(self)
        data["erased_at"] = self.erased_at.isoformat()
        data["unreachable"] = list(self.unreachable)
        return data

    def to_json(self) -> str:
        """The receipt as JSON text."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2).decode()

    def with_plane(self, plane: dict[str, Any]) -> ErasureReceipt:
        """The receipt with the plane's part replaced."""
        return replace(self, plane=plane)

    @classmethod
    def from_json(cls, text: str) -> ErasureReceipt:
        """A receipt back from :meth:`to_json` (as a tombstone keeps it)."""
        data = orjson.loads(text)
        data["erased_at"] = datetime.fromisoformat(data["erased_at"])
        data["unreachable"] = tuple(data["unreachable"])
        return cls(**data)


def plan_erasure(store: Store, thread_id: str) -> ErasurePlan:
    """Validate, then read what erasing ``thread_id`` from ``store`` would remove (no writes)."""
    action = "erase a thread"
    check_thread(thread_id, "", action)
    if store.tombstones is None:
        raise CapabilityError(
            f"cannot {action}: the {store.provider or type(store).__name__} store "
            f"{redact_url(store.url)} keeps no tombstones (it is read-only); erase the thread "
            "in the store that writes it"
        )
    store.ready()
    record = store.thread(thread_id)
    sent, pending, quarantined, runs = 0, [], [], []  # synced is None: the store keeps no outbox
    for chunk in store.scans.checkpoint_columns(
        thread_id, columns=("checkpoint_id", "run_id", "synced", "sync_error")
    ):
        for cid, run, synced, error in zip(
            chunk["checkpoint_id"],
            chunk["run_id"],
            chunk["synced"],
            chunk["sync_error"],
            strict=True,
        ):
            runs.append(run)
            if error is not None:
                quarantined.append((cid, error))
            elif synced is None:
                continue
            elif synced:
                sent += 1
            else:
                pending.append(cid)
    keys = [(cp.namespace, cp.checkpoint_id) for cp in store.history(thread_id, None)]
    writes = sum(len(w) for w in store.writes_of(thread_id, keys).values()) if keys else 0
    lease = record.lease if record is not None else None
    return ErasurePlan(
        thread_id=thread_id,
        tombstone=store.tombstones.hash_of(thread_id),
        already=store.tombstones.get(thread_id),
        checkpoints=record.checkpoints if record is not None else 0,
        bytes=record.size_bytes if record is not None else 0,
        pending_writes=writes,
        run_ids=tuple(sorted({r for r in runs if r})),
        ledger_record=record is not None and record.owner is not None,
        finished_mark=record is not None and record.finished_at is not None,
        live_lease=lease is not None and lease.live(store.clock()),
        park=store.parks is not None and store.parks.get(thread_id) is not None,
        outbox_sent=sent,
        outbox_pending=tuple(pending),
        outbox_quarantined=tuple(quarantined),
    )


def apply_erasure(store: Store, plan: ErasurePlan, *, by: str = "") -> ErasureReceipt:
    """Tombstone the thread and delete everything of it in one backend step; the receipt.

    Idempotent: on an erased thread the first tombstone stays and ``already_erased`` is true.
    """
    check_id(by, "erased_by", action="erase a thread", allow_empty=True)
    assert store.tombstones is not None
    stone = Tombstone(hash=plan.tombstone, erased_at=store.clock(), erased_by=by)
    stored, deleted = store._erase(plan.thread_id, stone)
    receipt = ErasureReceipt(
        tombstone=stored.hash,
        erased_at=stored.erased_at,
        erased_by=stored.erased_by,
        already_erased=plan.already is not None,
        store={
            "url": redact_url(store.url),
            "provider": store.provider,
            "checkpoints": deleted.checkpoints,
            "bytes": plan.bytes,
            "pending_writes": deleted.writes,
            "runs": list(plan.run_ids),
            "ledger_record": plan.ledger_record,
            "finished_mark": plan.finished_mark,
            "live_lease": plan.live_lease,
            "park": plan.park,
            "thread_key": _thread_key(store),
        },
        outbox={
            "kept": store.outbox is not None,
            "sent_rows_removed": plan.outbox_sent,
            "pending_dropped": list(plan.outbox_pending),
            "quarantined_dropped": [
                {"checkpoint_id": cid, "reason": why} for cid, why in plan.outbox_quarantined
            ],
        },
    )
    if plan.already is not None and plan.already.receipt:
        # The first erasure's receipt stays the record; this one only says it was asked again.
        return receipt
    store.tombstones.record_receipt(plan.thread_id, receipt.to_json())
    return receipt


def _thread_key(store: Store) -> str:
    """What became of the thread's encryption key (the seam where a stored key is destroyed)."""
    if store.sealer is None:
        return "none: the store keeps state in clear"
    # Data keys are derived per thread from the customer key and never stored (decision 0090):
    # there is nothing to destroy; copies elsewhere stay readable until that key is retired.
    return (
        "derived per thread from the customer key, never stored: nothing to destroy; copies "
        "elsewhere (backups, the plane) stay readable to a holder of that key until it is retired"
    )
