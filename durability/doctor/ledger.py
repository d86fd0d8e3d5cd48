"""Checks on the ledger, leases and parks: records of threads that do not exist, leases held by
runs that ended, parks past their deadline, finished marks the sweep should have acted on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from durability.doctor import reads
from durability.doctor.model import Check, Context
from durability.doctor.reads import header
from durability.humanize import format_age
from durability.model import STEP_RUN_END, ThreadRecord
from durability.stores.rows import Select

Finding = tuple[str | None, list[Any], str]


def _records(ctx: Context, which: str) -> Iterator[ThreadRecord]:
    """The records of the ledger threads ``which`` names (see :func:`reads.ledger_threads`)."""
    for thread_id in reads.ledger_threads(ctx.store, which):
        record = ctx.store.thread(thread_id)
        if record is not None:
            yield record


def intended_without_rows(record: ThreadRecord, ctx: Context) -> str | None:
    """Why a ledger record of a thread holding no checkpoint is as the seeds intend, or ``None``.

    * No run start recorded: a flow marks the session threads it owns in the deployment's
      ledger while their agents may have run on a per-run store (seed 004), so the record holds
      only a mark (or, once a new run took it out of the finished set, nothing).
    * A run start younger than ``grace``, or a live lease: a run records its ledger entry and
      takes its lease before its first checkpoint.
    """
    if record.started_at is None:
        return "a mark of a session thread a flow owns"
    if ctx.now - record.started_at < ctx.grace:
        return "a run starting"
    if record.lease is not None and record.lease.live(ctx.now):
        return "a run holding its lease"
    return None


def _ledger_orphans(ctx: Context) -> Iterator[Finding]:
    for record in _records(ctx, "empty"):
        if intended_without_rows(record, ctx) is not None:
            continue
        lease = f", its lease held by {record.lease.holder!r}" if record.lease else ""
        mark = ", marked finished" if record.finished_at else ""
        yield (
            record.thread_id,
            [record.thread_id],
            f"a ledger record (owner {record.owner!r}, run {record.run_id!r}, started "
            f"{record.started_at.isoformat() if record.started_at else '-'}{mark}{lease}) of a "
            "thread that holds no checkpoint",
        )


def _park_orphans(ctx: Context) -> Iterator[Finding]:
    assert ctx.store.parks is not None
    parks = ctx.store.parks.pending()
    held = reads.holding(ctx.store, [p.thread_id for p in parks])
    for park in parks:
        if park.thread_id not in held:
            yield (
                park.thread_id,
                [park.checkpoint_id],
                f"a park of run {park.run_id!r} (checkpoint {park.checkpoint_id!r}) on a thread "
                "that holds no checkpoint: nothing can resume it",
            )


def _parks_overdue(ctx: Context) -> Iterator[Finding]:
    assert ctx.store.parks is not None
    for park in ctx.store.parks.pending():
        if park.deadline < ctx.now:
            yield (
                park.thread_id,
                [park.checkpoint_id],
                f"a park of run {park.run_id!r} past its deadline {park.deadline.isoformat()} "
                f"({park.deadline_source}): nobody answered, and it no longer spares the thread",
            )


def _ended_leases(ctx: Context) -> Iterator[Finding]:
    for record in _records(ctx, "leased"):
        lease = record.lease
        if lease is None or not lease.run_id:
            continue
        rows = map(header, ctx.store._select(Select(record.thread_id, None, order="seq_desc")))
        if any(r.run_id == lease.run_id and r.step_type == STEP_RUN_END for r in rows):
            state = "live" if lease.live(ctx.now) else "expired"
            yield (
                record.thread_id,
                [lease.holder],
                f"a {state} lease held by {lease.holder!r} for run {lease.run_id!r}, which "
                f"ended; it holds the thread until {lease.expires_at.isoformat()}",
            )


def _finished_overdue(ctx: Context) -> Iterator[Finding]:
    limit = format_age(ctx.overdue)
    found = reads.overdue_marks(ctx.store, ctx.now - ctx.overdue, ctx.now, ctx.info_limit)
    for thread_id, due_at in found:
        late = format_age(ctx.now - due_at)
        yield (
            thread_id,
            [thread_id],
            f"marked finished, due {due_at.isoformat()} ({late} ago, over --overdue "
            f"{limit}): the sweep has not run (or keeps sparing it)",
        )


LEDGER_ORPHAN = Check(
    "ledger_without_thread",
    "warning",
    "a ledger record (run start, mark or lease) of a thread that holds no checkpoint, other "
    "than a flow's owned session thread or a run that is starting",
    _ledger_orphans,
    fix="durability threads delete {url} {thread}",
    applies=lambda ctx: ctx.store.ledger is not None,
)

PARK_ORPHAN = Check(
    "park_without_thread",
    "error",
    "a pending park on a thread that holds no checkpoint",
    _park_orphans,
    fix="durability threads delete {url} {thread}",
    applies=lambda ctx: ctx.store.parks is not None,
)

PARK_OVERDUE = Check(
    "park_past_deadline",
    "info",
    "a pending park whose deadline has passed (the thread is left to its waiting horizon)",
    _parks_overdue,
    fix="durability sweep {url}",
    applies=lambda ctx: ctx.store.parks is not None,
)

LEASE_ENDED = Check(
    "lease_of_ended_run",
    "warning",
    "a lease still recorded for a run that wrote its run end",
    _ended_leases,
    fix="durability doctor {url} --fix",
    repair="release_ended_leases",
    applies=lambda ctx: ctx.store.ledger is not None,
)

FINISHED_OVERDUE = Check(
    "finished_past_due",
    "info",
    "a thread marked finished whose due time passed longer ago than --overdue",
    _finished_overdue,
    fix="durability sweep {url}",
    applies=lambda ctx: ctx.store.ledger is not None,
    count=lambda ctx: reads.overdue_count(ctx.store, ctx.now - ctx.overdue, ctx.now),
)

CHECKS = (LEDGER_ORPHAN, PARK_ORPHAN, PARK_OVERDUE, LEASE_ENDED, FINISHED_OVERDUE)
