"""The sweep itself: delete what the plan says, in batches, deleting again what a writer raced
in (up to a bound), and report what went, what was spared and what was skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from durability.archive.format import ArchiveWriter
from durability.errors import ConfigError, SweepError, SweepLocked
from durability.model import Deleted
from durability.settings import Settings
from durability.stores.base import Store
from durability.sweep.archiving import archive_and_delete, delete_emptied
from durability.sweep.filters import LiveThreadFilter
from durability.sweep.plan import (
    DEFAULT_BATCH,
    HORIZONS,
    MAX_ROUNDS,
    SweepPlan,
    _skipped_reason,
    plan_sweep,
)

#: The sweep logs under its package's name (what it deleted at INFO, each spared thread at WARNING).
logger = logging.getLogger("durability.sweep")


@dataclass(frozen=True, slots=True)
class DeletedThread:
    """A thread the sweep deleted, and what it removed (rows raced in included)."""

    thread_id: str
    horizon: str
    checkpoints: int
    writes: int


@dataclass(frozen=True, slots=True)
class SparedThread:
    """A due thread a live-thread filter claimed."""

    thread_id: str
    horizon: str
    owner: str
    reason: str


@dataclass(frozen=True, slots=True)
class SkippedHorizon:
    """A horizon the provider handles itself: how many threads it holds there, and why."""

    horizon: str
    threads: int
    reason: str


@dataclass(frozen=True)
class SweepResult:
    """What a sweep deleted, spared and skipped, per horizon (keys of :data:`HORIZONS`).

    ``skipped`` has an entry only for a horizon the provider skips; ``rounds`` is the most
    delete rounds any batch needed; with no writer racing the delete it is 1 on the SQL stores
    (one read checks the threads are empty) and 2 elsewhere (a second delete is the check).
    """

    now: datetime
    provider: str
    deleted: Mapping[str, tuple[DeletedThread, ...]]
    spared: Mapping[str, tuple[SparedThread, ...]]
    skipped: Mapping[str, SkippedHorizon]
    not_due: Mapping[str, int]
    rounds: int = 0

    def checkpoints(self, horizon: str | None = None) -> int:
        """Checkpoints deleted (in one horizon, or both)."""
        return sum(d.checkpoints for h in self._horizons(horizon) for d in self.deleted[h])

    def writes(self, horizon: str | None = None) -> int:
        """Pending writes deleted (in one horizon, or both)."""
        return sum(d.writes for h in self._horizons(horizon) for d in self.deleted[h])

    def deleted_ids(self, horizon: str | None = None) -> list[str]:
        """The ids of the deleted threads (in one horizon, or both)."""
        return [d.thread_id for h in self._horizons(horizon) for d in self.deleted[h]]

    @staticmethod
    def _horizons(horizon: str | None) -> tuple[str, ...]:
        return HORIZONS if horizon is None else (horizon,)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (what ``durability sweep --json`` prints)."""
        return {
            "now": self.now.isoformat(),
            "provider": self.provider,
            "rounds": self.rounds,
            "deleted": {
                h: {
                    "threads": len(self.deleted[h]),
                    "checkpoints": self.checkpoints(h),
                    "writes": self.writes(h),
                    "thread_ids": self.deleted_ids(h),
                }
                for h in HORIZONS
            },
            "spared": {
                h: [
                    {"thread_id": s.thread_id, "owner": s.owner, "reason": s.reason}
                    for s in self.spared[h]
                ]
                for h in HORIZONS
            },
            "skipped": {
                h: (
                    {"threads": self.skipped[h].threads, "reason": self.skipped[h].reason}
                    if h in self.skipped
                    else None
                )
                for h in HORIZONS
            },
            "not_due": dict(self.not_due),
            "totals": {
                "threads": len(self.deleted_ids()),
                "checkpoints": self.checkpoints(),
                "writes": self.writes(),
                "spared": sum(len(v) for v in self.spared.values()),
            },
        }


def sweep(
    store: Store,
    settings: Settings | None = None,
    now: datetime | None = None,
    *,
    filters: Sequence[LiveThreadFilter] | None = None,
    progress: bool = False,
    batch_size: int = DEFAULT_BATCH,
    archive: str | Path | None = None,
) -> SweepResult:
    """Delete every thread whose horizon has passed; admin-only and destructive.

    Computes :func:`plan_sweep` (same arguments) and deletes its ``delete`` rows, finished
    horizon first, ``batch_size`` threads per store call; ``progress=True`` shows a tqdm bar
    when there is more than one batch. ``archive=DIR`` writes everything the sweep deletes to
    a gzip JSON Lines archive in ``DIR`` first (``docs/formats/archive.md``), and deletes only
    what was written and flushed (see :mod:`durability.sweep.archiving`). Raises :class:`SweepError` when a filter fails (nothing
    is deleted) or a thread still receives writes after :data:`MAX_ROUNDS` delete rounds, and
    :class:`~durability.errors.CheckpointDeleteError` from the Redis store's own rule.

    One sweep per store at a time: it holds the store's sweep lock throughout, and raises
    :class:`~durability.errors.SweepLocked` (naming the other sweep's host, process and start)
    when another sweep holds it. The result and the metrics count a thread as deleted only
    when this sweep's delete removed its rows (or it held no checkpoint to remove).
    """
    if batch_size < 1:
        raise ConfigError(f"cannot sweep: batch_size={batch_size} must be at least 1")
    with _counted_run(), store.scans.sweep_lock().held():
        plan = plan_sweep(store, settings, now, filters=filters)
        spared = _spare(plan)
        writer = _archive_writer(store, plan, archive)
        try:
            deleted, rounds = _apply(
                store, plan, progress=progress, batch_size=batch_size, archive=writer
            )
        finally:
            if writer is not None:
                writer.close()
    return _logged(
        SweepResult(
            now=plan.now,
            provider=plan.provider,
            deleted=deleted,
            spared=spared,
            skipped=_skipped(store, plan),
            not_due={h: len(plan._where("not_due", h)) for h in HORIZONS},
            rounds=rounds,
        ),
        store,
    )


@contextmanager
def _counted_run() -> Iterator[None]:
    """Counts the sweep run in the metrics by its outcome: refused (another sweep holds the
    lock), failure or success (then also the time of the last success)."""
    from durability import metrics

    try:
        yield
    except SweepLocked:
        metrics.SWEEP_RUNS.labels(outcome="refused").inc()
        raise
    except BaseException:
        metrics.SWEEP_RUNS.labels(outcome="failure").inc()
        raise
    metrics.SWEEP_RUNS.labels(outcome="success").inc()
    metrics.SWEEP_LAST_SUCCESS.set_to_current_time()


def _logged(result: SweepResult, store: Store) -> SweepResult:
    """``result``, once its counts are in the log."""
    logger.info(
        "sweep of %r at %s: deleted %d threads (%d checkpoints, %d writes), spared %d",
        store,
        result.now.isoformat(),
        len(result.deleted_ids()),
        result.checkpoints(),
        result.writes(),
        sum(len(v) for v in result.spared.values()),
    )
    return result


def _archive_writer(
    store: Store, plan: SweepPlan, archive: str | Path | None
) -> ArchiveWriter | None:
    if archive is None or not plan._where("delete"):
        return None
    return ArchiveWriter(archive, source=store.url, provider=store.provider, now=plan.now)


def _spare(plan: SweepPlan) -> dict[str, tuple[SparedThread, ...]]:
    """Log and count the plan's spared threads (before the first delete)."""
    from durability import metrics

    spared: dict[str, list[SparedThread]] = {h: [] for h in HORIZONS}
    at = plan._where("spared")
    for thread_id, horizon, owner, reason in zip(
        *(plan._values(name, at) for name in ("thread_id", "horizon", "owner", "reason")),
        strict=True,
    ):
        logger.warning("sweep spared thread %r (%s horizon): %s", thread_id, horizon, reason)
        metrics.SWEEP_SPARED.labels(horizon=horizon, owner=owner).inc()
        spared[horizon].append(SparedThread(thread_id, horizon, owner, reason))
    return {h: tuple(v) for h, v in spared.items()}


def _skipped(store: Store, plan: SweepPlan) -> dict[str, SkippedHorizon]:
    """The waiting horizon, when the provider handles it itself: reported even with no thread in it."""
    reason = _skipped_reason(store)
    if reason is None:
        return {}
    count = len(plan._where("skipped"))
    return {"waiting": SkippedHorizon("waiting", count, reason)}


def _apply(
    store: Store,
    plan: SweepPlan,
    *,
    progress: bool,
    batch_size: int,
    archive: ArchiveWriter | None = None,
) -> tuple[dict[str, tuple[DeletedThread, ...]], int]:
    """Delete the plan's ``delete`` rows, horizon by horizon, batch by batch.

    Each batch is counted on the deleted metrics as it completes, so a sweep that fails later
    still counts what it did delete.
    """
    from tqdm.auto import tqdm

    from durability import metrics

    work: dict[str, list[str]] = {
        h: plan._values("thread_id", plan._where("delete", h)) for h in HORIZONS
    }
    # A thread the plan saw empty (a ledger record alone) is this sweep's to count; one whose
    # rows another deleter removed first (nothing left for this sweep) is not.
    held_none = {
        t
        for h in HORIZONS
        for t, n in zip(work[h], plan._values("checkpoints", plan._where("delete", h)), strict=True)
        if not n
    }
    total = sum(len(ids) for ids in work.values())
    deleted: dict[str, tuple[DeletedThread, ...]] = {}
    most_rounds = 0
    with tqdm(
        total=total, unit="thread", desc="sweep", disable=not progress or total <= batch_size
    ) as bar:
        for horizon, ids in work.items():
            done: dict[str, Deleted] = {}
            order = store.delete_order(ids)
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                removed, rounds = _delete_until_empty(store, batch, archive, plan.now)
                most_rounds = max(most_rounds, rounds)
                mine = {t: d for t, d in removed.items() if _removed_any(d) or t in held_none}
                metrics.SWEEP_DELETED_THREADS.labels(horizon=horizon).inc(len(mine))
                metrics.SWEEP_DELETED_CHECKPOINTS.labels(horizon=horizon).inc(
                    sum(d.checkpoints for d in mine.values())
                )
                done.update(mine)
                bar.update(len(batch))
            # Reported in the plan's order, whatever order the store deleted in.
            deleted[horizon] = tuple(
                DeletedThread(t, horizon, done[t].checkpoints, done[t].writes)
                for t in ids
                if t in done
            )
    return deleted, most_rounds


def _delete_until_empty(
    store: Store, batch: list[str], archive: ArchiveWriter | None = None, now: Any = None
) -> tuple[dict[str, Deleted], int]:
    """Delete ``batch`` until each thread is empty; a round that removed rows may have raced a
    writer, so the threads the store still finds rows in go again (up to :data:`MAX_ROUNDS`).
    With an archive each round archives first and deletes what it archived, and the emptied
    threads are deleted last.
    """
    totals = dict.fromkeys(batch, Deleted())
    pending = batch
    for round_no in range(1, MAX_ROUNDS + 1):
        if archive is not None:
            removed = archive_and_delete(store, pending, archive, now)
        else:
            removed = store.delete_threads(pending)
        if round_no == 1:  # most of what there is: its records as they are, no additions
            totals.update(removed)
        else:
            for thread_id, d in removed.items():
                totals[thread_id] += d
        raced = [t for t in pending if _removed_any(removed.get(t))]
        holding = store.still_holding(raced) if raced else set()
        pending = [t for t in raced if t in holding]
        if not pending:
            if archive is not None:
                for thread_id, d in delete_emptied(store, batch).items():
                    totals[thread_id] += d
            return totals, round_no
    last = removed[pending[0]]
    raise SweepError(
        f"the sweep failed: thread {pending[0]!r} still received checkpoints after {MAX_ROUNDS} "
        f"delete rounds (the last one removed {last.checkpoints} checkpoints and {last.writes} "
        f"pending writes){_and_more(pending)}; a run keeps writing to it: stop that run, then "
        "sweep again (threads deleted before it stay deleted)"
    )


def _removed_any(d: Deleted | None) -> bool:
    return d is not None and (d.checkpoints > 0 or d.writes > 0)


def _and_more(pending: list[str]) -> str:
    return f", and {len(pending) - 1} more threads too" if len(pending) > 1 else ""
