"""Run every check on a store: :data:`CHECKS` (the one list) and :func:`diagnose`."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING

from durability._util import redact_url
from durability.doctor import backend, erasure, fastaiagent, ledger, replica, rows
from durability.doctor.model import SEVERITIES, Check, Context, Diagnosis, Problem
from durability.errors import CheckpointStoreFormatError, ConfigError
from durability.stores.base import FORMAT_GENERATION

if TYPE_CHECKING:
    from durability.doctor.replica import Replica
    from durability.stores.base import Store

#: Every check, in the order the doctor runs them (the format generation comes first, alone).
#: The backend checks run first: reading threads makes a Redis store drop index entries their
#: threads do not support, which would hide them.
CHECKS: tuple[Check, ...] = (
    *backend.CHECKS,
    *rows.CHECKS,
    *ledger.CHECKS,
    *erasure.CHECKS,
    *replica.CHECKS,
    *fastaiagent.CHECKS,
)

#: A run's ledger entry younger than this is a run starting (the runner's default lease TTL).
DEFAULT_GRACE = timedelta(seconds=30)
#: A finished mark further past due than this means the sweep is not running.
DEFAULT_OVERDUE = timedelta(days=1)

FORMAT_CHECK = "format_generation"


def diagnose(
    store: Store,
    *,
    now: datetime | None = None,
    grace: timedelta = DEFAULT_GRACE,
    overdue: timedelta = DEFAULT_OVERDUE,
    only: set[str] | None = None,
    plane: Replica | None = None,
    info_limit: int | None = None,
    sample: int | None = None,
    thread_count: int | None = None,
) -> Diagnosis:
    """Check every invariant of ``store`` and return what is broken, worst first.

    Nothing is written. A store in another format generation is reported alone: no other
    check can read it. ``only`` runs just the named checks. ``plane`` (a
    :class:`~durability.doctor.replica.Replica`) adds the per-thread comparison with the plane.

    For a store too large to list or read whole (the defaults check and list everything):
    ``info_limit`` lists at most that many findings of each ``info`` check and counts the rest
    (:attr:`Diagnosis.counted`); ``sample`` makes the checks that read every checkpoint
    (``missing_parent``: the threads of ``sample`` checkpoints picked at random, in a store of
    more threads) and every outbox record (``outbox_without_checkpoint``: ``sample`` synced
    records) read a sample (:attr:`Diagnosis.sampled`); ``thread_count``: how many threads
    the store holds, when already counted.
    """
    when = now if now is not None else store.clock()
    where = redact_url(store.url)
    generation = _generation_problem(store, where)
    if generation is not None:
        unread = {c.name: "the store's format generation is not this version's" for c in CHECKS}
        return Diagnosis(where, when, [generation], [FORMAT_CHECK], unread)
    if info_limit is not None and info_limit < 1:
        raise ConfigError(f"cannot run the doctor: info_limit={info_limit} must be at least 1")
    if sample is not None and sample < 1:
        raise ConfigError(f"cannot run the doctor: sample={sample} must be at least 1")
    ctx = Context(store, when, grace, overdue, plane, info_limit, sample, thread_count)
    diagnosis = Diagnosis(where, when, [], [FORMAT_CHECK], {})
    for check in CHECKS:
        if only is not None and check.name not in only:
            continue
        if not check.applies(ctx):
            diagnosis.skipped[check.name] = check.unless
            continue
        diagnosis.checks.append(check.name)
        _run(check, ctx, diagnosis)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    diagnosis.problems.sort(key=lambda p: (order[p.severity], p.check, p.thread_id or ""))
    diagnosis.sampled.update(ctx.samples)
    return diagnosis


def _run(check: Check, ctx: Context, diagnosis: Diagnosis) -> None:
    """Add what ``check`` finds to ``diagnosis``: an ``info`` check's first
    :attr:`Context.info_limit` findings, the rest counted."""
    findings = iter(check.run(ctx))
    limit = ctx.info_limit if check.severity == "info" else None
    listed = [check.problem(ctx, *finding) for finding in islice(findings, limit)]
    if limit is not None and len(listed) == limit:
        total = check.count(ctx) if check.count else limit + sum(1 for _ in findings)
        if total > limit:
            diagnosis.counted[check.name] = total
    diagnosis.problems.extend(listed)


def _generation_problem(store: Store, where: str) -> Problem | None:
    """The format-generation problem, or ``None`` when the store is this version's."""
    try:
        store.ready()
    except CheckpointStoreFormatError:
        found = store._read_generation()
        what = (
            "holds checkpoints but records no format generation"
            if found is None
            else f"was written in format generation {found}"
        )
        return Problem(
            FORMAT_CHECK,
            "error",
            None,
            0,
            f"the store {what}; this version reads generation {FORMAT_GENERATION}, so every "
            "run, read and sweep on it is refused",
            f"durability store reset {where}",
        )
    return None
