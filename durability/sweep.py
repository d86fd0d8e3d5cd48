"""The checkpoint sweep: the one operation that deletes threads.

It is admin-only and destructive, and nothing runs it in the background: drive it on a cadence
(cron, a Kubernetes CronJob, a scheduler; see the retention guide). It covers the store it is
given — the deployment's configured store, the one every process shares.

Two horizons:

* ``finished``: every thread marked finished whose due time (fixed at its mark, from the
  retention in force then) is at or before ``now`` is deleted, on every provider.
* ``waiting``: on providers that sweep waiting threads (postgres, sqlite), every thread whose
  newest checkpoint is older than its waiting retention (the one declared at its latest run
  start, else the platform's) is deleted — a finished thread too, when that comes before its
  mark's due time (a mark never extends a thread's life; Redis's TTL takes it marked or not). On redis the key TTL does this and on memory the
  thread lives with its process: both are reported as skipped.

It works as validate → plan → apply. :func:`plan_sweep` reads every thread once, classifies it
and asks every live-thread filter about every due thread; :func:`sweep` computes the very same
plan and applies its ``delete`` rows, so a preview can never disagree with the sweep. A thread a
filter claims is spared: logged at WARNING, counted on
``durability_checkpoint_sweep_spared_total{horizon,owner}``, listed in the result, and — if it
is finished — left in the finished set, so the next sweep asks again. A filter that raises fails
the sweep before anything is deleted.

Deleting a thread removes every checkpoint, pending write, ledger record, park and outbox row it
holds, in set-based batches. A checkpoint a run writes while the thread is being deleted is
deleted again, round after round, up to :data:`MAX_ROUNDS`; then the sweep fails loudly naming
the thread. The Redis store's own delete already repeats until the thread is empty and raises
:class:`~durability.errors.CheckpointDeleteError` as soon as a round stops making progress.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, overload

from durability.clock import as_utc, to_micros
from durability.errors import ConfigError, SweepError, SweepLocked
from durability.model import Deleted, ThreadRecord
from durability.settings import Retention, Settings, format_duration, waiting_horizon
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.stores.scans import SweepColumns

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: The two retention horizons, in the order the sweep deletes them.
HORIZONS = ("finished", "waiting")
#: What the sweep does with a thread: delete it, spare it (a filter claims it), nothing yet
#: (``not_due``), or nothing because the provider handles that horizon itself (``skipped``).
ACTIONS = ("delete", "spared", "not_due", "skipped")
#: Delete rounds per batch before a thread that keeps receiving writes fails the sweep.
MAX_ROUNDS = 100
#: Threads deleted per store call (one transaction on SQL).
DEFAULT_BATCH = 1000


# ---------------------------------------------------------------------------- filters


class LiveThreadFilter(Protocol):
    """Something that knows a due thread is still live, and so must not be deleted.

    ``owner`` labels the spared metric and the plan's rows (``park``, ``lease``, …). Before
    the first delete, :meth:`claims` is asked about every candidate; raising fails the sweep.
    """

    owner: str

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        """``{thread_id: why it is live}`` for the candidates this filter claims."""
        ...


class _ParkFilter:
    """Claims a thread with a pending park whose deadline has not passed."""

    owner = "park"

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        # Every handle is asked, not only one that can park: another handle on the same
        # SQLite file may have been opened with single_worker=True and parked there.
        wanted = set(_candidate_ids(candidates))
        return {
            p.thread_id: f"a run is parked until {p.deadline.isoformat()} ({p.reason or 'no reason'})"
            for p in pending_parks(store)
            if p.thread_id in wanted and p.deadline > now
        }

    def __repr__(self) -> str:
        return "PARK_FILTER"


class _LeaseFilter:
    """Claims a thread whose run holds a live lease (a run in progress)."""

    owner = "lease"

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        return {
            c.thread_id: (
                f"run {c.lease.run_id or '?'} ({c.lease.holder}) holds its lease until "
                f"{c.lease.expires_at.isoformat()}"
            )
            for c in _maybe_leased(candidates, now)
            if c.lease is not None and c.lease.live(now)
        }

    def __repr__(self) -> str:
        return "LEASE_FILTER"


class _ReplicationFilter:
    """In a store that replicates, claims a thread holding checkpoints the plane lacks.

    Pending and quarantined rows both count: the plane has neither, and the sweep never
    deletes what was never replicated (fastaiagent's ``prune()`` did). A store replicates once
    connected, disconnected or not, until ``durability outbox forget``; a store never connected
    does not, so a deployment without a plane sweeps freely (see :attr:`Store.replicates`).
    """

    owner = "replication"

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        if not store.replicates:
            return {}
        missing = store.unreplicated()
        return {
            thread_id: (
                f"the plane does not have {missing[thread_id]} of its checkpoints yet (pending "
                "or quarantined; see `durability outbox status`)"
            )
            for thread_id in _candidate_ids(candidates)
            if missing.get(thread_id)
        }

    def __repr__(self) -> str:
        return "REPLICATION_FILTER"


class _Candidates(Sequence[ThreadRecord]):
    """The due threads handed to the filters: each one's real :class:`ThreadRecord`, built
    from the store's columns when a filter reads it, so a filter that needs only the ids (the
    built-in ones) costs no record per thread."""

    def __init__(self, table: SweepColumns, at: list[int]) -> None:
        self._table, self._at = table, at
        self.thread_ids: list[str] = table.columns["thread_id"][at].tolist() if at else []

    def __len__(self) -> int:
        return len(self._at)

    @overload
    def __getitem__(self, index: int) -> ThreadRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ThreadRecord]: ...

    def __getitem__(self, index: int | slice) -> ThreadRecord | Sequence[ThreadRecord]:
        if isinstance(index, slice):
            return [self._table.record(i) for i in self._at[index]]
        return self._table.record(self._at[index])

    def __iter__(self) -> Iterator[ThreadRecord]:
        return map(self._table.record, self._at)

    def leased_after(self, now: datetime) -> list[ThreadRecord]:
        """The records of the candidates whose lease (if any) expires after ``now``."""
        import numpy as np

        expires = self._table.columns["lease_expires_at"][self._at]
        live = expires > np.datetime64(to_micros(now), "us")  # NaT compares false
        return [self._table.record(self._at[i]) for i in np.flatnonzero(live).tolist()]


def _candidate_ids(candidates: Sequence[ThreadRecord]) -> list[str]:
    if isinstance(candidates, _Candidates):
        return candidates.thread_ids
    return [c.thread_id for c in candidates]


def _maybe_leased(candidates: Sequence[ThreadRecord], now: datetime) -> Sequence[ThreadRecord]:
    """The candidates that may hold a live lease (all of them, unless the columns tell)."""
    if isinstance(candidates, _Candidates):
        return candidates.leased_after(now)
    return candidates


PARK_FILTER: LiveThreadFilter = _ParkFilter()
LEASE_FILTER: LiveThreadFilter = _LeaseFilter()
REPLICATION_FILTER: LiveThreadFilter = _ReplicationFilter()

_filters: list[LiveThreadFilter] = [PARK_FILTER, LEASE_FILTER, REPLICATION_FILTER]
_filters_lock = threading.Lock()


def _check_filter(f: object) -> LiveThreadFilter:
    owner = getattr(f, "owner", None)
    if not isinstance(owner, str) or not owner or not callable(getattr(f, "claims", None)):
        raise ConfigError(
            f"cannot use {f!r} as a live-thread filter: it needs an `owner` (a non-empty string, "
            "the spared metric's label) and a `claims(store, candidates, now)` method"
        )
    return f  # type: ignore[return-value]


def register_filter(f: LiveThreadFilter) -> None:
    """Ask ``f`` about every due thread in every later sweep (a no-op if already registered)."""
    _check_filter(f)
    with _filters_lock:
        if f not in _filters:
            _filters.append(f)


def unregister_filter(f: LiveThreadFilter) -> None:
    """Stop asking ``f`` (a no-op if it is not registered)."""
    with _filters_lock:
        if f in _filters:
            _filters.remove(f)


def registered_filters() -> list[LiveThreadFilter]:
    """The filters a sweep asks by default, in the order they are asked."""
    with _filters_lock:
        return list(_filters)


# ---------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class PlanRow:
    """What the sweep does with one thread, and why.

    ``owner`` is the owner of the live-thread filter that spared the thread (``None`` unless
    ``action`` is ``spared``). ``due_at`` is when the thread's horizon passes: its mark's due
    time when finished, its newest checkpoint plus its waiting retention when waiting (``None``
    where nothing measures it: a memory store's waiting thread, a thread with no checkpoint and
    no recorded run start). ``declared_*`` are the values its latest run start declared.
    """

    thread_id: str
    horizon: str
    action: str
    reason: str
    owner: str | None
    due_at: datetime | None
    newest_at: datetime | None
    finished_at: datetime | None
    declared_waiting: timedelta | None
    declared_finished: timedelta | None
    checkpoints: int
    size_bytes: int


#: The columns of :meth:`SweepPlan.to_frame` and their dtypes.
PLAN_COLUMNS: dict[str, str] = {
    "thread_id": "string",
    "horizon": "string",
    "action": "string",
    "reason": "string",
    "owner": "string",
    "due_at": "datetime64[ns, UTC]",
    "newest_at": "datetime64[ns, UTC]",
    "finished_at": "datetime64[ns, UTC]",
    "declared_waiting": "timedelta64[ns]",
    "declared_finished": "timedelta64[ns]",
    "checkpoints": "int64",
    "size_bytes": "int64",
}


@dataclass(frozen=True, eq=False)
class SweepPlan:
    """One row per thread the store holds: what a sweep at ``now`` with ``settings`` does.

    The plan keeps its rows as columns (numpy arrays, in row order); :attr:`rows` builds the
    :class:`PlanRow` objects the first time it is read, and :meth:`to_frame` and
    :meth:`summary` read the columns, so a large plan shown as a table never builds them.
    """

    now: datetime
    settings: Settings
    provider: str
    _columns: Mapping[str, Any] = field(repr=False)

    @cached_property
    def rows(self) -> tuple[PlanRow, ...]:
        """The plan's rows: finished threads first, each horizon by thread id."""
        c = self._columns
        return tuple(
            map(
                PlanRow,
                c["thread_id"].tolist(),
                c["horizon"].tolist(),
                c["action"].tolist(),
                c["reason"].tolist(),
                c["owner"].tolist(),
                _datetimes(c["due_at"]),
                _datetimes(c["newest_at"]),
                _datetimes(c["finished_at"]),
                c["declared_waiting"].astype(object).tolist(),
                c["declared_finished"].astype(object).tolist(),
                c["checkpoints"].tolist(),
                c["size_bytes"].tolist(),
            )
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SweepPlan):
            return NotImplemented
        mine = (self.now, self.settings, self.provider, self.rows)
        return mine == (other.now, other.settings, other.provider, other.rows)

    def __hash__(self) -> int:
        return hash((self.now, self.settings, self.provider, self.rows))

    def deletes(self, horizon: str | None = None) -> tuple[PlanRow, ...]:
        """The rows the sweep deletes (in one horizon, or both), in the order it deletes them."""
        rows = self.rows
        return tuple(rows[i] for i in self._where("delete", horizon))

    def _where(self, action: str, horizon: str | None = None) -> list[int]:
        """The positions of the rows with ``action`` (in ``horizon``, or both)."""
        import numpy as np

        chosen = self._columns["action"] == action
        if horizon is not None:
            chosen &= self._columns["horizon"] == horizon
        return np.flatnonzero(chosen).tolist()

    def _values(self, name: str, at: list[int]) -> list[Any]:
        return self._columns[name][at].tolist() if at else []

    def to_frame(self) -> pd.DataFrame:
        """The rows as a DataFrame with :data:`PLAN_COLUMNS` (times aware UTC)."""
        import pandas as pd

        data: dict[str, Any] = {}
        dtype: Any  # pandas-stubs type astype's argument as literals only
        for name, dtype in PLAN_COLUMNS.items():
            values = self._columns[name]
            if dtype.startswith("datetime64"):
                data[name] = pd.Series(values).dt.tz_localize("UTC").astype(dtype)
            elif dtype.startswith("timedelta64"):
                data[name] = pd.Series(values).astype(dtype)
            else:
                data[name] = pd.Series(values, dtype=dtype)
        return pd.DataFrame(data, columns=list(PLAN_COLUMNS))

    def summary(self) -> dict[str, Any]:
        """Counts per horizon and action, and the checkpoints and bytes the sweep would delete."""
        c = self._columns
        counts = {h: dict.fromkeys(ACTIONS, 0) for h in HORIZONS}
        going = {h: {"threads": 0, "checkpoints": 0, "size_bytes": 0} for h in HORIZONS}
        for h in HORIZONS:
            in_horizon = c["horizon"] == h
            for a in ACTIONS:
                counts[h][a] = int((in_horizon & (c["action"] == a)).sum())
            deleted = in_horizon & (c["action"] == "delete")
            going[h] = {
                "threads": int(deleted.sum()),
                "checkpoints": int(c["checkpoints"][deleted].sum()),
                "size_bytes": int(c["size_bytes"][deleted].sum()),
            }
        return {
            "now": self.now,
            "provider": self.provider,
            "threads": len(c["thread_id"]),
            "counts": counts,
            "delete": going,
            "total_delete": {
                key: sum(going[h][key] for h in HORIZONS)
                for key in ("threads", "checkpoints", "size_bytes")
            },
        }


def _datetimes(values: Any) -> list[datetime | None]:
    """A datetime64[us] column as aware UTC datetimes (``None`` for NaT)."""
    return [None if d is None else d.replace(tzinfo=UTC) for d in values.tolist()]


def plan_sweep(
    store: Store,
    settings: Settings | None = None,
    now: datetime | None = None,
    *,
    filters: Sequence[LiveThreadFilter] | None = None,
) -> SweepPlan:
    """What :func:`sweep` would do now, without deleting anything: one row per thread.

    ``settings`` defaults to the store's, ``now`` to its clock, ``filters`` to
    :func:`registered_filters`. A filter that raises raises :class:`SweepError` here too.
    """
    settings, when = _inputs(store, settings, now)
    with _bulk_allocation():
        return _plan(store, settings, when, store.sweep_columns(), filters)


@contextmanager
def _bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan reads the store.

    A plan allocates a few objects per thread (the store's rows, the records the filters
    read), none of them in a reference cycle, and the collector's passes over the growing
    young generation were a quarter of a 100,000-thread plan. The collector's previous state
    is restored afterwards, even on error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _inputs(
    store: Store, settings: Settings | None, now: datetime | None
) -> tuple[Settings, datetime]:
    if settings is not None and not isinstance(settings, Settings):
        raise ConfigError(
            f"cannot plan a sweep: settings must be a durability.settings.Settings, got "
            f"{type(settings).__name__}; build one with Settings.from_env()"
        )
    return settings or store.settings, as_utc(now) if now is not None else store.clock()


def _plan(
    store: Store,
    settings: Settings,
    now: datetime,
    table: SweepColumns,
    filters: Sequence[LiveThreadFilter] | None,
) -> SweepPlan:
    """Classify every thread with array operations, then ask the filters about the due ones."""
    import numpy as np

    order = _plan_order(table)
    c: dict[str, Any] = {name: column[order] for name, column in table.columns.items()}
    c.pop("lease_expires_at")
    n = len(order)
    c["horizon"] = np.full(n, "waiting", dtype=object)
    c["action"] = np.empty(n, dtype=object)
    c["reason"] = np.empty(n, dtype=object)
    c["owner"] = np.full(n, None, dtype=object)
    c["due_at"] = c["due_at"].copy()
    finished = ~np.isnat(c["finished_at"])
    moment = np.datetime64(to_micros(now), "us")
    _classify_finished(c, finished, moment)
    _classify_waiting(c, ~finished, moment, settings, store)
    _classify_idle_finished(c, finished, moment, settings, store)
    due = np.flatnonzero(c["action"] == "delete")
    candidates = _Candidates(table, order[due].tolist())
    claims = _ask(store, candidates, now, filters)
    position = dict(zip(candidates.thread_ids, due.tolist(), strict=True))
    for thread_id, claim in claims.items():
        at = position[thread_id]
        c["action"][at], c["owner"][at] = "spared", claim[0][0]
        c["reason"][at] = "; ".join(f"spared by {o}: {why}" for o, why in claim)
    columns = {name: c[name] for name in PLAN_COLUMNS}
    return SweepPlan(now=now, settings=settings, provider=store.provider, _columns=columns)


def _plan_order(table: SweepColumns) -> Any:
    """Row order: finished threads first (the sweep deletes that horizon first), each by id."""
    import numpy as np

    ids = table.columns["thread_id"].tolist()
    by_id = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.intp)
    waiting = np.isnat(table.columns["finished_at"])[by_id]
    return by_id[np.argsort(waiting, kind="stable")]


def _classify_finished(c: dict[str, Any], rows: Any, now: Any) -> None:
    """A finished thread is judged on the due time fixed at its mark (``due_at <= now``)."""
    import numpy as np

    c["horizon"][rows] = "finished"
    known = rows & ~np.isnat(c["due_at"])
    passed = known & (c["due_at"] <= now)
    c["action"][rows] = "not_due"
    c["action"][passed] = "delete"
    c["reason"][rows & ~known] = "finished, but no due time is recorded"
    c["reason"][passed] = "finished, and its due time has passed"
    c["reason"][known & ~passed] = "finished; not due yet"


def _classify_idle_finished(
    c: dict[str, Any], finished: Any, now: Any, settings: Settings, store: Store
) -> None:
    """A finished thread not yet due its mark, but idle past its waiting retention, is deleted
    on the waiting horizon where the sweep measures it (the waiting rule covers *every* thread,
    as Redis's TTL takes a thread marked or not): a mark never extends a thread's life."""

    pending = finished & (c["action"] == "not_due")
    if _skipped_reason(store) is not None or not pending.any():
        return
    judged = {k: c[k].copy() for k in ("action", "reason", "due_at")}
    judged |= {k: c[k] for k in ("declared_waiting", "newest_at", "started_at")}
    _classify_waiting(judged, pending, now, settings, store)
    idle = pending & (judged["action"] == "delete")
    c["horizon"][idle] = "waiting"
    c["action"][idle] = "delete"
    c["due_at"][idle] = judged["due_at"][idle]
    c["reason"][idle] = "finished but not due yet; " + judged["reason"][idle].astype(object)


def _classify_waiting(
    c: dict[str, Any], rows: Any, now: Any, settings: Settings, store: Store
) -> None:
    """An unmarked thread is due its waiting horizon after its newest checkpoint (else its run
    start). The horizon rule runs once per distinct declared value, not per thread.

    The reasons name the rule, not the times (``due_at`` and ``newest_at`` carry those), and
    are built once per distinct (declared value, passed, has a checkpoint).
    """
    import numpy as np

    kinds, kind = np.unique(c["declared_waiting"], return_inverse=True)
    kind = kind.reshape(-1)
    horizons = [_waiting_rule(settings, k) for k in kinds.tolist()]
    span = np.array([h for h, _whose in horizons], dtype="timedelta64[us]")[kind]
    no_checkpoint = np.isnat(c["newest_at"])
    since = np.where(no_checkpoint, c["started_at"], c["newest_at"])
    due = since + span
    skip_reason = _skipped_reason(store)
    if skip_reason is not None:
        c["action"][rows] = "skipped"
        c["reason"][rows] = skip_reason
        keeps_time = store.capabilities.ttl  # a TTL store does expire its waiting threads
        c["due_at"][rows] = due[rows] if keeps_time else np.datetime64("NaT", "us")
        return
    unmeasured = rows & np.isnat(due)
    c["action"][unmeasured] = "not_due"
    c["reason"][unmeasured] = _NOTHING_TO_MEASURE
    c["due_at"][rows] = due[rows]
    measured = rows & ~unmeasured
    passed = due <= now
    c["action"][measured] = np.where(passed[measured], "delete", "not_due")
    code = (kind * 2 + passed) * 2 + no_checkpoint
    codes, which = np.unique(code[measured], return_inverse=True)
    texts = np.empty(len(codes), dtype=object)
    for i, value in enumerate(codes.tolist()):
        (horizon, whose), was_passed, bare = horizons[value // 4], bool(value & 2), bool(value & 1)
        where = "idle past" if was_passed else "within"
        text = f"{where} its {whose} waiting retention of {format_duration(horizon)}"
        texts[i] = text + " (no checkpoint: counted from its run start)" if bare else text
    c["reason"][measured] = texts[which.reshape(-1)]


def _waiting_rule(settings: Settings, declared: timedelta | None) -> tuple[timedelta, str]:
    """The waiting horizon for a declared waiting value, and whose value it is.

    A declared value above a since-lowered platform value is capped by it (the ceiling) and
    reads as the platform's.
    """
    horizon = waiting_horizon(settings, None if declared is None else Retention(waiting=declared))
    return horizon, "declared" if declared == horizon else "platform"


_NOTHING_TO_MEASURE = (
    "holds no checkpoint and records no run start: nothing to count its waiting retention from"
)


def _skipped_reason(store: Store) -> str | None:
    """Why the sweep leaves the store's waiting threads alone, or ``None`` if it sweeps them."""
    caps = store.capabilities
    if caps.sweeps_waiting:
        return None
    if caps.ttl:
        return (
            f"skipped: on {store.provider} each key's TTL (the waiting retention) deletes a waiting "
            "thread, not the sweep"
        )
    if store.provider == "memory":
        return "skipped: on memory a waiting thread lives with its process, not past it"
    return f"skipped: the {store.provider or type(store).__name__} store does not sweep waiting threads"


def _ask(
    store: Store,
    candidates: Sequence[ThreadRecord],
    now: datetime,
    filters: Sequence[LiveThreadFilter] | None,
) -> dict[str, list[tuple[str, str]]]:
    """``{thread_id: [(owner, why), …]}`` for the candidates some filter claims."""
    chosen = registered_filters() if filters is None else [_check_filter(f) for f in filters]
    if not candidates:
        return {}
    wanted = set(_candidate_ids(candidates))
    claims: dict[str, list[tuple[str, str]]] = {}
    for f in chosen:
        try:
            claimed = f.claims(store, candidates, now)
        except Exception as exc:
            raise SweepError(
                f"the sweep failed before deleting anything: the live-thread filter {f.owner!r} "
                f"({f!r}) raised {type(exc).__name__}: {exc}; fix or unregister the filter, then "
                "sweep again"
            ) from exc
        if not isinstance(claimed, Mapping):
            raise SweepError(
                f"the sweep failed before deleting anything: the live-thread filter {f.owner!r} "
                f"returned {type(claimed).__name__}, not a mapping of thread id to reason"
            )
        for thread_id, why in claimed.items():
            if thread_id in wanted:
                claims.setdefault(thread_id, []).append((f.owner, str(why)))
    return claims


# ---------------------------------------------------------------------------- the sweep


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
) -> SweepResult:
    """Delete every thread whose horizon has passed; admin-only and destructive.

    Computes :func:`plan_sweep` (same arguments) and deletes its ``delete`` rows, finished
    horizon first, ``batch_size`` threads per store call; ``progress=True`` shows a tqdm bar
    when there is more than one batch. Raises :class:`SweepError` when a filter fails (nothing
    is deleted) or a thread still receives writes after :data:`MAX_ROUNDS` delete rounds, and
    :class:`~durability.errors.CheckpointDeleteError` from the Redis store's own rule.

    One sweep per store at a time: it holds the store's sweep lock throughout, and raises
    :class:`~durability.errors.SweepLocked` (naming the other sweep's host, process and start)
    when another sweep holds it. The result and the metrics count a thread as deleted only
    when this sweep's delete removed its rows (or it held no checkpoint to remove).
    """
    from durability import metrics

    if batch_size < 1:
        raise ConfigError(f"cannot sweep: batch_size={batch_size} must be at least 1")
    try:
        with store.scans.sweep_lock().held():
            plan = plan_sweep(store, settings, now, filters=filters)
            spared = _spare(plan)
            deleted, rounds = _apply(store, plan, progress=progress, batch_size=batch_size)
    except SweepLocked:
        metrics.SWEEP_RUNS.labels(outcome="refused").inc()
        raise
    except BaseException:
        metrics.SWEEP_RUNS.labels(outcome="failure").inc()
        raise
    metrics.SWEEP_RUNS.labels(outcome="success").inc()
    metrics.SWEEP_LAST_SUCCESS.set_to_current_time()
    result = SweepResult(
        now=plan.now,
        provider=plan.provider,
        deleted=deleted,
        spared=spared,
        skipped=_skipped(store, plan),
        not_due={h: len(plan._where("not_due", h)) for h in HORIZONS},
        rounds=rounds,
    )
    logger.info(
        "sweep of %r at %s: deleted %d threads (%d checkpoints, %d writes), spared %d",
        store,
        plan.now.isoformat(),
        len(result.deleted_ids()),
        result.checkpoints(),
        result.writes(),
        sum(len(v) for v in spared.values()),
    )
    return result


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
    store: Store, plan: SweepPlan, *, progress: bool, batch_size: int
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
                removed, rounds = _delete_until_empty(store, batch)
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


def _delete_until_empty(store: Store, batch: list[str]) -> tuple[dict[str, Deleted], int]:
    """Delete ``batch`` until each thread is empty; a round that removed rows may have raced a
    writer, so the threads the store still finds rows in go again (up to :data:`MAX_ROUNDS`).
    """
    totals = dict.fromkeys(batch, Deleted())
    pending = batch
    for round_no in range(1, MAX_ROUNDS + 1):
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


# ---------------------------------------------------------------------------- policy diff


def policy_diff(
    store: Store, current: Settings, proposed: Settings, now: datetime | None = None
) -> pd.DataFrame:
    """Threads whose sweep action differs between two settings, on the same store and ``now``.

    Columns: thread_id, horizon, current_action, proposed_action, checkpoints, size_bytes. A
    finished thread's due time is fixed at its mark, so a proposed finished retention changes
    nothing for threads already marked: only new marks move.
    """
    import pandas as pd

    _inputs(store, current, now)
    _inputs(store, proposed, now)
    when = as_utc(now) if now is not None else store.clock()
    with _bulk_allocation():
        table = store.sweep_columns()
        before = _plan(store, current, when, table, None)._columns
        after = _plan(store, proposed, when, table, None)._columns
    # One table, one order: both plans hold the same thread in the same row.
    changed = before["action"] != after["action"]
    return pd.DataFrame(
        {
            "thread_id": pd.Series(before["thread_id"][changed], dtype="string"),
            "horizon": pd.Series(before["horizon"][changed], dtype="string"),
            "current_action": pd.Series(before["action"][changed], dtype="string"),
            "proposed_action": pd.Series(after["action"][changed], dtype="string"),
            "checkpoints": pd.Series(before["checkpoints"][changed], dtype="int64"),
            "size_bytes": pd.Series(before["size_bytes"][changed], dtype="int64"),
        }
    )


__all__ = [
    "ACTIONS",
    "DEFAULT_BATCH",
    "HORIZONS",
    "LEASE_FILTER",
    "MAX_ROUNDS",
    "PARK_FILTER",
    "PLAN_COLUMNS",
    "REPLICATION_FILTER",
    "DeletedThread",
    "LiveThreadFilter",
    "PlanRow",
    "SkippedHorizon",
    "SparedThread",
    "SweepPlan",
    "SweepResult",
    "plan_sweep",
    "policy_diff",
    "register_filter",
    "registered_filters",
    "sweep",
    "unregister_filter",
]
