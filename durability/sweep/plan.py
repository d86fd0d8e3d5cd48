"""The sweep's plan: every thread classified by horizon and action, with its reason.

:func:`plan_sweep` reads the store once (as columns), classifies each thread — due on the
finished horizon, idle past its waiting horizon, not due, or skipped where a TTL or the process
lifetime enforces the horizon — and asks the filters about the due ones. It writes nothing, and
the sweep deletes exactly what it says.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from durability.clock import as_utc, to_micros
from durability.errors import ConfigError, SweepError
from durability.model import ThreadRecord
from durability.settings import Retention, Settings, format_duration, waiting_horizon
from durability.stores.base import Store
from durability.stores.scans import SweepColumns
from durability.sweep.filters import (
    LiveThreadFilter,
    _candidate_ids,
    _Candidates,
    _check_filter,
    registered_filters,
)

if TYPE_CHECKING:
    import pandas as pd


#: The two retention horizons, in the order the sweep deletes them.
HORIZONS = ("finished", "waiting")


#: What the sweep does with a thread: delete it, spare it (a filter claims it), nothing yet
#: (``not_due``), or nothing because the provider handles that horizon itself (``skipped``).
ACTIONS = ("delete", "spared", "not_due", "skipped")


#: Delete rounds per batch before a thread that keeps receiving writes fails the sweep.
MAX_ROUNDS = 100


#: Threads deleted per store call (one transaction on SQL).
DEFAULT_BATCH = 1000


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
    #: What the store says about the plan (a LangGraph store without marks: only the waiting
    #: horizon applies).
    notes: tuple[str, ...] = ()

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

    @property
    def thread_count(self) -> int:
        """How many threads (rows) the plan holds."""
        return len(self._columns["thread_id"])

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

    def to_frame(self, action: str | None = None, limit: int | None = None) -> pd.DataFrame:
        """The rows as a DataFrame with :data:`PLAN_COLUMNS` (times aware UTC): every row, or
        those with ``action``, the first ``limit`` of them (in the plan's order) when given —
        what a table of a plan of millions of threads shows (:meth:`groups` counts them all)."""
        import numpy as np
        import pandas as pd

        at: Any = slice(None)
        if action is not None:
            at = np.flatnonzero(self._columns["action"] == action)
        if limit is not None:
            at = (at if action is not None else np.arange(len(self._columns["action"])))[:limit]
        data: dict[str, Any] = {}
        dtype: Any  # pandas-stubs type astype's argument as literals only
        for name, dtype in PLAN_COLUMNS.items():
            values = self._columns[name][at]
            if dtype.startswith("datetime64"):
                data[name] = pd.Series(values).dt.tz_localize("UTC").astype(dtype)
            elif dtype.startswith("timedelta64"):
                data[name] = pd.Series(values).astype(dtype)
            else:
                data[name] = pd.Series(values, dtype=dtype)
        return pd.DataFrame(data, columns=list(PLAN_COLUMNS))

    def groups(self) -> pd.DataFrame:
        """Threads, checkpoints and bytes per (horizon, action) present in the plan, counted
        over the plan's columns: the plan of any size as a table of a few rows."""
        import numpy as np
        import pandas as pd

        c, rows = self._columns, []
        for h in HORIZONS:
            for a in ACTIONS:
                chosen = (c["horizon"] == h) & (c["action"] == a)
                if chosen.any():
                    found = (int(chosen.sum()), int(c["checkpoints"][chosen].sum()))
                    rows.append((h, a, *found, int(np.sum(c["size_bytes"][chosen]))))
        names = ["horizon", "action", "threads", "checkpoints", "size_bytes"]
        frame = pd.DataFrame(rows, columns=names).astype(dict.fromkeys(names[2:], "int64"))
        return frame.set_index(["horizon", "action"])

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
            "notes": list(self.notes),
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


def plan_sweeps(
    store: Store,
    settings: Sequence[Settings],
    now: datetime | None = None,
    *,
    filters: Sequence[LiveThreadFilter] | None = None,
) -> tuple[SweepPlan, ...]:
    """:func:`plan_sweep` for each of several settings at the same ``now``, from one read of
    the store: what comparing a proposed policy with the one in force costs once, not twice.

    The plans hold the same threads in the same rows (what :func:`~durability.sweep.plans_diff`
    compares).
    """
    when = _inputs(store, None, now)[1]
    chosen = [_inputs(store, s, when)[0] for s in settings]
    with _bulk_allocation():
        table = store.sweep_columns()
        return tuple(_plan(store, s, when, table, filters) for s in chosen)


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
    return SweepPlan(
        now=now,
        settings=settings,
        provider=store.provider,
        _columns=columns,
        notes=tuple(store.scans.sweep_notes(table)),
    )


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
