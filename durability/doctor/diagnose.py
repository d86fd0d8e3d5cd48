"""Run every check on a store: :data:`CHECKS` (the one list) and :func:`diagnose`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durability._util import redact_url
from durability.doctor import backend, erasure, fastaiagent, ledger, replica, rows
from durability.doctor.model import SEVERITIES, Check, Context, Diagnosis, Problem
from durability.errors import CheckpointStoreFormatError
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
) -> Diagnosis:
    """Check every invariant of ``store`` and return what is broken, worst first.

    Nothing is written. A store in another format generation is reported alone: no other
    check can read it. ``only`` runs just the named checks. ``plane`` (a
    :class:`~durability.doctor.replica.Replica`) adds the per-thread comparison with the plane.
    """
    when = now if now is not None else store.clock()
    where = redact_url(store.url)
    generation = _generation_problem(store, where)
    if generation is not None:
        unread = {c.name: "the store's format generation is not this version's" for c in CHECKS}
        return Diagnosis(where, when, [generation], [FORMAT_CHECK], unread)
    ctx = Context(store, when, grace, overdue, plane)
    problems: list[Problem] = []
    ran: list[str] = [FORMAT_CHECK]
    skipped: dict[str, str] = {}
    for check in CHECKS:
        if only is not None and check.name not in only:
            continue
        if not check.applies(ctx):
            skipped[check.name] = check.unless
            continue
        ran.append(check.name)
        problems += [check.problem(ctx, *finding) for finding in check.run(ctx)]
    order = {s: i for i, s in enumerate(SEVERITIES)}
    problems.sort(key=lambda p: (order[p.severity], p.check, p.thread_id or ""))
    return Diagnosis(where, when, problems, ran, skipped)


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
