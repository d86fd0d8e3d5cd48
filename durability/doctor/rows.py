"""Checks on the rows of a thread: pending writes whose checkpoint is gone, outbox records
whose checkpoint is gone, and a parent missing in the middle of a thread's chain."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from durability.doctor import outbox, reads
from durability.doctor.model import Check, Context, named

Finding = tuple[str | None, list[Any], str]


def _orphan_writes(ctx: Context) -> Iterator[Finding]:
    for thread_id, keys in sorted(reads.orphan_writes(ctx.store).items()):
        checkpoints = sorted({cid for _ns, cid, _task, _idx in keys})
        yield (
            thread_id,
            keys,
            f"{len(keys)} pending writes against checkpoints the thread does not hold: "
            f"{named(checkpoints)}",
        )


def _missing_parents(ctx: Context) -> Iterator[Finding]:
    if ctx.sampling is not None:
        ctx.samples["missing_parent"] = (len(ctx.sampling[0]), ctx.sampling[1], "threads")
    for thread_id, orphans in sorted(reads.missing_parents(ctx.store, ctx.picked).items()):
        pairs = [f"{cid} (parent {parent})" for _ns, cid, parent in orphans]
        yield (
            thread_id,
            orphans,
            f"{len(orphans)} checkpoints whose parent is not in the thread, below older rows: "
            f"{named(pairs)}",
        )


def _orphan_outbox(ctx: Context) -> Iterator[Finding]:
    found = outbox.orphan_outbox(ctx.store, ctx.sample, ctx.samples)
    for thread_id, keys in sorted(found.items(), key=lambda i: i[0] or ""):
        yield (
            thread_id,
            keys,
            f"{len(keys)} outbox records of checkpoints the thread no longer holds (seq "
            f"{named([seq for _tag, seq in keys])})",
        )


ORPHAN_WRITES = Check(
    "writes_without_checkpoint",
    "warning",
    "pending writes whose checkpoint the store does not hold (LangGraph never reads them)",
    _orphan_writes,
    fix="durability doctor {url} --fix",
    repair="drop_orphan_writes",
)

ORPHAN_OUTBOX = Check(
    "outbox_without_checkpoint",
    "warning",
    "outbox records (replication state) of checkpoints the store no longer holds",
    _orphan_outbox,
    fix="durability doctor {url} --fix",
    repair="drop_orphan_outbox",
    applies=lambda ctx: ctx.store.provider in ("redis", *reads.SQL_PROVIDERS),
    unless="the store keeps no outbox",
)

MISSING_PARENT = Check(
    "missing_parent",
    "error",
    "a checkpoint whose parent is absent while older rows of its thread remain (not a fork "
    "origin, a latest-only restore or a thread pruned to its latest)",
    _missing_parents,
)

CHECKS = (ORPHAN_WRITES, ORPHAN_OUTBOX, MISSING_PARENT)
