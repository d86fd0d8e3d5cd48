"""The erasure check: a thread erased (tombstoned) that the store still holds rows of."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from durability.doctor.model import Check, Context

Finding = tuple[str | None, list[Any], str]


def _tombstoned(ctx: Context) -> Iterator[Finding]:
    tombstones = ctx.store.tombstones
    assert tombstones is not None
    stones = {s.hash: s for s in tombstones.all()}
    if not stones:  # the common case: no thread id is hashed
        return
    ids = ctx.threads.columns["thread_id"]
    for i, thread_id in enumerate(ids):
        stone = stones.get(tombstones.hash_of(thread_id))
        if stone is None:
            continue
        record = ctx.threads.record(i)
        ledger = ", its ledger record" if record.started_at or record.finished_at else ""
        yield (
            thread_id,
            [thread_id],
            f"erased at {stone.erased_at.isoformat()} (tombstone {stone.hash}) but still holds "
            f"{record.checkpoints} checkpoints{ledger}",
        )


TOMBSTONED = Check(
    "erased_thread_holds_rows",
    "error",
    "a thread with a tombstone (erased) that the store still holds checkpoints or records of",
    _tombstoned,
    fix="durability threads erase {url} {thread}",
    applies=lambda ctx: ctx.store.tombstones is not None,
    unless="the store keeps no tombstones",
)

CHECKS = (TOMBSTONED,)
