"""What-if questions about retention values, answered over the frames of :mod:`durability.frames`.

Everything here is a pure function of DataFrames: nothing reads a store, nothing deletes.
The functions are vectorised with numpy over the threads (one pass per policy, never a Python
loop per thread), so 100,000 threads under 50 candidate policies take well under a second.

* :func:`daily`: for candidate :class:`Policy` values (waiting, finished) and a range of days,
  how many threads and bytes the sweep would delete each day and how many would remain.
* :func:`refused_parks`: the parks a shorter waiting value would have refused.
* :func:`lost_conversations`: the threads whose longest idle gap exceeds a waiting value (a
  sweep with that value would have deleted them between two turns).
* :func:`outage_backlog`: the outbox backlog over time had the plane been down for a while.

The retention rules are the ones of :mod:`durability.settings`, called once per
distinct declared retention rather than re-derived here: a waiting thread is due its waiting
horizon after its newest checkpoint; a finished thread is due its finished horizon after its
mark, or its waiting horizon if that passes first (each thread on one horizon, as
:func:`durability.sweep.plan_sweep` classifies it). A policy under
study is every thread's ceiling, as the platform values are: a declared value above it is
capped at it (:func:`durability.settings.waiting_horizon` applies the ceiling). Unlike the real sweep, which keeps the due time fixed at the mark, a simulated
policy applies its finished value to every mark (the question is "what if this value had been
in force"). Threads the sweep's filters would spare (an unexpired park, a live lease) are
deleted at the first sweep after they stop being live. A thread holding rows the plane lacks
(``unreplicated > 0``: pending or quarantined, which the sweep's replication filter spares) is
never deleted within the simulated window: nothing drains in a simulation, so it stays as
unreplicated as it is now.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from durability._extras import needs_extra

with needs_extra("durability.simulate"):  # the notebook extra
    import numpy as np
    import pandas as pd

from durability.errors import ConfigError
from durability.settings import (
    DEFAULT_FINISHED,
    Retention,
    Settings,
    finished_horizon,
    format_duration,
    parse_duration,
    waiting_horizon,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Ints = NDArray[np.int64]

#: Columns of :func:`daily`, in order, with their dtypes.
DAILY_COLUMNS: dict[str, str] = {
    "policy": "string",
    "waiting": "timedelta64[ns]",
    "finished": "timedelta64[ns]",
    "day": "datetime64[ns, UTC]",
    "deleted_threads": "int64",
    "deleted_bytes": "int64",
    "remaining_threads": "int64",
    "remaining_bytes": "int64",
    "deleted_finished_threads": "int64",
    "deleted_waiting_threads": "int64",
}

#: Columns of :func:`outage_backlog` (the same as ``frames.backlog``).
BACKLOG_COLUMNS: dict[str, str] = {
    "time": "datetime64[ns, UTC]",
    "pending": "int64",
    "oldest_pending_age": "timedelta64[ns]",
}

_NAT = np.iinfo(np.int64).min
_NEVER = np.iinfo(np.int64).max
_DAY_NS = 86_400 * 10**9


@dataclass(frozen=True, slots=True)
class Policy:
    """A candidate pair of platform retention values: ``waiting`` and ``finished``.

    Either may be given as a :class:`~datetime.timedelta` or a duration text (``30d``, ``12h``,
    ``P7D``); both must be positive.
    """

    waiting: timedelta
    finished: timedelta

    def __post_init__(self) -> None:
        object.__setattr__(self, "waiting", parse_duration(self.waiting, name="policy waiting"))
        object.__setattr__(self, "finished", parse_duration(self.finished, name="policy finished"))

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The policy in force in ``settings``."""
        return cls(settings.waiting_retention, settings.finished_retention)

    @property
    def label(self) -> str:
        """A short name for legends and the ``policy`` column: ``waiting 30d / finished 7d``."""
        return (
            f"waiting {format_duration(self.waiting)} / finished {format_duration(self.finished)}"
        )

    def settings(self, base: Settings | None = None) -> Settings:
        """Settings with this policy's values (``base``'s URL; a settings write, so checked)."""
        if base is None:
            return Settings(waiting_retention=self.waiting, finished_retention=self.finished)
        return base.update(waiting_retention=self.waiting, finished_retention=self.finished)


PolicyLike = Policy | Settings


def as_policy(value: PolicyLike | timedelta | str, *, finished: timedelta | None = None) -> Policy:
    """A :class:`Policy` from a policy, settings, or a waiting value (``finished`` then applies,
    default the platform default capped at the waiting value)."""
    if isinstance(value, Policy):
        return value
    if isinstance(value, Settings):
        return Policy.from_settings(value)
    waiting = parse_duration(value, name="waiting")
    return Policy(waiting, min(finished or DEFAULT_FINISHED, waiting))


# ---------------------------------------------------------------------------- array helpers


def _ns(values: pd.Series[Any]) -> Ints:
    """Aware datetimes as int64 nanoseconds since the epoch (NaT: ``_NAT``)."""
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    as_dt = pd.to_datetime(values, utc=True)
    return np.asarray(as_dt.to_numpy(dtype="datetime64[ns]").view(np.int64))


def _td_ns(values: pd.Series[Any]) -> Ints:
    """Durations as int64 nanoseconds (NaT: ``_NAT``)."""
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    as_td = pd.to_timedelta(values)
    return np.asarray(as_td.to_numpy(dtype="timedelta64[ns]").view(np.int64))


def _bools(values: pd.Series[Any]) -> NDArray[np.bool_]:
    return np.asarray(values.fillna(False).to_numpy(dtype=bool))


def _instant(value: datetime | date | str) -> pd.Timestamp:
    """An aware UTC instant; a date is its midnight UTC."""
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time(0), tzinfo=UTC)
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        raise ConfigError(
            f"cannot simulate from {value!r}: it has no time zone; pass an aware datetime "
            "(e.g. datetime(..., tzinfo=UTC)) or a date"
        )
    return stamp.tz_convert("UTC").as_unit("ns")


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"cannot simulate over this frame: it lacks the {what} columns {missing}; "
            f"pass durability.frames.{what}(store) (see frames.COLUMNS)"
        )


@dataclass(frozen=True, slots=True)
class _Declared:
    """The threads' declared retention, factorised: few distinct pairs, one code per thread."""

    codes: Ints
    pairs: list[Retention]

    @classmethod
    def of(cls, threads: pd.DataFrame) -> _Declared:
        waiting = _td_ns(threads["declared_waiting"])
        finished = _td_ns(threads["declared_finished"])
        # Hash-factorise each column, then the pair of codes: O(n), no sort of the threads.
        waiting_codes, waiting_values = pd.factorize(waiting)
        finished_codes, finished_values = pd.factorize(finished)
        pair_codes, pairs = pd.factorize(waiting_codes * len(finished_values) + finished_codes)
        return cls(
            np.asarray(pair_codes, dtype=np.int64),
            [
                Retention(
                    _td_or_none(int(waiting_values[p // len(finished_values)])),
                    _td_or_none(int(finished_values[p % len(finished_values)])),
                )
                for p in pairs
            ],
        )

    def horizons(self, policy: Policy) -> tuple[Ints, Ints]:
        """Per thread: (waiting horizon, finished horizon) in ns under ``policy``."""
        settings = policy.settings()
        waiting = np.array([_td_int(waiting_horizon(settings, d)) for d in self.pairs], np.int64)
        finished = np.array([_td_int(finished_horizon(settings, d)) for d in self.pairs], np.int64)
        return waiting[self.codes], finished[self.codes]


def _td_or_none(value: int) -> timedelta | None:
    return None if value == _NAT else pd.Timedelta(int(value), unit="ns").to_pytimedelta()


def _td_int(value: timedelta) -> int:
    return int(pd.Timedelta(value).as_unit("ns").value)


# ---------------------------------------------------------------------------- daily


_THREAD_COLUMNS = (
    "size_bytes",
    "newest_at",
    "finished_at",
    "declared_waiting",
    "declared_finished",
    "parked",
    "park_deadline",
    "lease_expires_at",
    "unreplicated",
)


@dataclass(frozen=True, slots=True)
class _Threads:
    """The columns the simulation reads, as int64 arrays (ns for times)."""

    size: Ints
    newest: Ints
    finished: Ints
    spared_until: Ints
    declared: _Declared

    @classmethod
    def of(cls, threads: pd.DataFrame) -> _Threads:
        _require(threads, _THREAD_COLUMNS, "threads")
        park = np.where(_bools(threads["parked"]), _ns(threads["park_deadline"]), _NAT)
        lease = _ns(threads["lease_expires_at"])
        # Rows the plane lacks spare a thread for good here: nothing drains in a simulation.
        unreplicated = threads["unreplicated"].fillna(0).to_numpy(dtype=np.int64) > 0
        return cls(
            size=np.asarray(threads["size_bytes"].fillna(0).to_numpy(dtype=np.int64)),
            newest=_ns(threads["newest_at"]),
            finished=_ns(threads["finished_at"]),
            spared_until=np.where(unreplicated, _NEVER, np.maximum(park, lease)),
            declared=_Declared.of(threads),
        )

    def due(self, policy: Policy) -> tuple[Ints, NDArray[np.bool_]]:
        """When the sweep may delete each thread under ``policy``, and whether it is finished.

        A finished thread is due its finished horizon after its mark, or its waiting horizon
        after its newest checkpoint if that comes first (as the sweep classifies it); a thread
        with no checkpoint is due only by its mark.
        """
        waiting_h, finished_h = self.declared.horizons(policy)
        marked = self.finished != _NAT
        waiting_due = np.where(self.newest == _NAT, _NEVER, self.newest + waiting_h)
        finished_due = np.where(marked, self.finished + finished_h, _NEVER)
        by_finished = marked & (finished_due <= waiting_due)
        due = np.minimum(finished_due, waiting_due)
        # Spared while a park is unexpired or a lease is live: deleted at the first sweep after;
        # never while the plane lacks some of its rows.
        return np.maximum(due, self.spared_until), by_finished


def daily(
    threads: pd.DataFrame,
    policies: PolicyLike | Sequence[PolicyLike],
    start: datetime | date,
    days: int,
) -> pd.DataFrame:
    """Simulate one sweep a day, ``days`` days from ``start``, under each policy.

    Args:
        threads: ``durability.frames.threads(store)`` (or a frame with its columns).
        policies: a :class:`Policy` or :class:`~durability.settings.Settings`, or several.
        start: the first sweep (an aware datetime; a date is its midnight UTC); the next ones
            follow a day apart.
        days: how many daily sweeps.

    Returns:
        One row per (policy, day), columns :data:`DAILY_COLUMNS`: what that day's sweep
        deletes (threads, bytes; threads by horizon) and what remains after it. The first
        day's sweep deletes everything already due by ``start`` that the sweep would not spare,
        so it matches :func:`durability.sweep.plan_sweep` at ``start`` for the settings in
        force. No new writes are assumed, and nothing drains: a thread with ``unreplicated``
        rows is never deleted.
    """
    if days < 1:
        raise ConfigError(f"cannot simulate {days} days: give days >= 1")
    chosen = [as_policy(p) for p in ([policies] if isinstance(policies, PolicyLike) else policies)]
    if not chosen:
        raise ConfigError("cannot simulate no policy: pass at least one Policy")
    day_ns = _instant(start).value + _DAY_NS * np.arange(days, dtype=np.int64)
    data = _Threads.of(threads)
    total_threads, total_bytes = len(data.size), int(data.size.sum())
    columns: dict[str, list[Ints]] = {c: [] for c in list(DAILY_COLUMNS)[4:]}
    for policy in chosen:
        due, by_finished = data.due(policy)
        day = np.searchsorted(day_ns, due, side="left")  # the first sweep at or after due
        deleted = np.bincount(day, minlength=days + 1)[:days]
        deleted_bytes = np.bincount(day, weights=data.size, minlength=days + 1)[:days]
        finished = np.bincount(day[by_finished], minlength=days + 1)[:days]
        columns["deleted_threads"].append(deleted)
        columns["deleted_bytes"].append(np.rint(deleted_bytes).astype(np.int64))
        columns["remaining_threads"].append(total_threads - np.cumsum(deleted))
        columns["remaining_bytes"].append(total_bytes - np.cumsum(columns["deleted_bytes"][-1]))
        columns["deleted_finished_threads"].append(finished)
        columns["deleted_waiting_threads"].append(deleted - finished)
    repeat = np.full(len(chosen), days)
    return pd.DataFrame(
        {
            "policy": pd.array(np.repeat([p.label for p in chosen], repeat), dtype="string"),
            "waiting": pd.to_timedelta(
                np.repeat([_td_int(p.waiting) for p in chosen], repeat), unit="ns"
            ),
            "finished": pd.to_timedelta(
                np.repeat([_td_int(p.finished) for p in chosen], repeat), unit="ns"
            ),
            "day": pd.to_datetime(np.tile(day_ns, len(chosen)), unit="ns", utc=True),
            **{c: np.concatenate(v).astype(np.int64) for c, v in columns.items()},
        }
    )


def kept(threads: pd.DataFrame, policies: Sequence[PolicyLike], now: datetime) -> pd.DataFrame:
    """What a sweep at ``now`` would keep under each policy: one row per policy.

    Columns: ``policy``, ``waiting``, ``finished``, ``kept_threads``, ``kept_bytes``,
    ``deleted_threads``, ``deleted_bytes``.
    """
    first = daily(threads, policies, now, 1)
    return pd.DataFrame(
        {
            "policy": first["policy"],
            "waiting": first["waiting"],
            "finished": first["finished"],
            "kept_threads": first["remaining_threads"],
            "kept_bytes": first["remaining_bytes"],
            "deleted_threads": first["deleted_threads"],
            "deleted_bytes": first["deleted_bytes"],
        }
    )


# ---------------------------------------------------------------------------- parks, gaps


def _waiting_horizons(declared_waiting: pd.Series[Any], policy: Policy) -> pd.Series[Any]:
    """Per row: the waiting horizon under ``policy`` given the row's declared waiting value."""
    unset = pd.Series(pd.NaT, index=declared_waiting.index, dtype="timedelta64[ns]")
    frame = pd.DataFrame({"declared_waiting": declared_waiting, "declared_finished": unset})
    waiting_h, _ = _Declared.of(frame).horizons(policy)
    return pd.Series(pd.to_timedelta(waiting_h, unit="ns"), index=declared_waiting.index)


def refused_parks(
    parks: pd.DataFrame,
    waiting: PolicyLike | timedelta | str,
    *,
    threads: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The parks a waiting value would have refused: deadline past ``created_at`` + horizon.

    The horizon is ``waiting`` (a value, a :class:`Policy` or settings), capped by the
    thread's declared waiting value when ``threads`` (``frames.threads``) is given, exactly as
    :func:`durability.settings.check_park_deadline` checks a park when it is made.

    Returns the refused rows of ``parks`` (``frames.parks``) with three more columns:
    ``horizon`` (timedelta), ``allowed_until`` (the latest deadline the park could have had)
    and ``excess`` (how far past it the deadline is), longest excess first.
    """
    _require(parks, ("thread_id", "created_at", "deadline"), "parks")
    policy = as_policy(waiting)
    declared = pd.Series(pd.NaT, index=parks.index, dtype="timedelta64[ns]")
    if threads is not None and len(parks):
        _require(threads, ("thread_id", "declared_waiting"), "threads")
        lookup = threads.drop_duplicates("thread_id").set_index("thread_id")["declared_waiting"]
        declared = pd.Series(
            pd.to_timedelta(parks["thread_id"].map(lookup)), index=parks.index
        ).astype("timedelta64[ns]")
    horizon = _waiting_horizons(declared, policy)
    allowed = pd.to_datetime(parks["created_at"], utc=True) + horizon
    deadline = pd.to_datetime(parks["deadline"], utc=True)
    out = parks.assign(horizon=horizon, allowed_until=allowed, excess=deadline - allowed)
    refused = out[(deadline > allowed).fillna(False).to_numpy(dtype=bool)]
    return refused.sort_values("excess", ascending=False, kind="stable").reset_index(drop=True)


def lost_conversations(
    threads: pd.DataFrame, waiting: PolicyLike | timedelta | str
) -> pd.DataFrame:
    """The threads a waiting value would lose between two turns: longest idle gap > horizon.

    A conversation (or a run resumed late) whose longest gap between consecutive checkpoints
    exceeds its waiting horizon (``waiting``, capped by the thread's declared value) would
    have been deleted by a sweep during that gap. Returns those rows of ``threads``
    (``frames.threads``) with ``horizon`` and ``excess`` (gap minus horizon), longest first.
    """
    _require(threads, ("thread_id", "max_idle_gap", "declared_waiting"), "threads")
    policy = as_policy(waiting)
    horizon = _waiting_horizons(threads["declared_waiting"], policy)
    gap = pd.to_timedelta(threads["max_idle_gap"])
    out = threads.assign(horizon=horizon, excess=gap - horizon)
    lost = out[(gap > horizon).fillna(False).to_numpy(dtype=bool)]
    return lost.sort_values("excess", ascending=False, kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------- outage


def outage_backlog(
    checkpoints: pd.DataFrame,
    outage_start: datetime,
    outage_length: timedelta | str,
    drain_rate: float | None = None,
    *,
    freq: str | timedelta | None = None,
) -> pd.DataFrame:
    """The outbox backlog had the plane been down from ``outage_start`` for ``outage_length``.

    Replays the checkpoints' ``created_at`` (``frames.checkpoints``): rows written before the
    outage are taken as already replicated; rows written from its start queue up, nothing
    drains until it ends, then the outbox drains in write order at ``drain_rate`` rows per
    second (``None``: at once) while new rows keep arriving.

    Returns :data:`BACKLOG_COLUMNS` (like ``frames.backlog``) on a regular grid of ``freq``
    (default: about 200 points) from the outage's start until the backlog is empty again (or
    the outage ends, if later). ``oldest_pending_age`` is NaT when nothing is pending.
    ``frame.attrs`` holds ``outage_start``, ``outage_end``, ``cleared_at`` (when the outbox
    is first empty again after the outage), ``peak_pending`` and ``peak_age``.
    """
    _require(checkpoints, ("created_at",), "checkpoints")
    length = parse_duration(outage_length, name="outage length")
    if drain_rate is not None and drain_rate <= 0:
        raise ConfigError(
            f"cannot simulate a drain at {drain_rate!r} rows/s: give a positive rate, or None "
            "for a drain that sends the whole backlog at once"
        )
    start = _instant(outage_start).value
    end = start + _td_int(length)
    created = np.sort(_ns(checkpoints["created_at"]))
    arrivals = created[created >= start]
    sent = _departures(arrivals, end, drain_rate)
    cleared = _cleared_at(arrivals, sent, int(np.searchsorted(arrivals, end)), end)
    stop = max(end, cleared)
    step = _grid_step(stop - start, freq)
    grid = start + step * np.arange((stop - start) // step + 2, dtype=np.int64)
    arrived = np.searchsorted(arrivals, grid, side="right")
    gone = np.searchsorted(sent, grid, side="right")
    pending = arrived - gone
    oldest = arrivals[np.minimum(gone, max(len(arrivals) - 1, 0))] if len(arrivals) else grid
    age = np.where(pending > 0, grid - oldest, _NAT)
    frame = pd.DataFrame(
        {
            "time": pd.to_datetime(grid, unit="ns", utc=True),
            "pending": pending.astype(np.int64),
            "oldest_pending_age": pd.to_timedelta(age, unit="ns"),
        }
    )
    frame.attrs.update(
        outage_start=pd.Timestamp(start, unit="ns", tz="UTC"),
        outage_end=pd.Timestamp(end, unit="ns", tz="UTC"),
        cleared_at=pd.Timestamp(cleared, unit="ns", tz="UTC"),
        peak_pending=int(pending.max()) if len(pending) else 0,
        peak_age=frame["oldest_pending_age"].max(),
    )
    return frame


def describe_outage(frame: pd.DataFrame) -> str:
    """One sentence on an :func:`outage_backlog` frame (its ``attrs``), for notebooks and reports:
    ``a 2d outage from 2026-11-28 20:01 UTC: up to 16 rows waiting, the oldest 16h52m old;
    the outbox is empty again at 2026-11-30 20:06 UTC``."""
    info = frame.attrs
    start, end = info["outage_start"], info["outage_end"]
    length = format_duration((end - start).to_pytimedelta())
    age = info["peak_age"]
    oldest = "-" if pd.isna(age) else format_duration(age.round("min").to_pytimedelta())
    return (
        f"a {length} outage from {start:%Y-%m-%d %H:%M} UTC: up to {info['peak_pending']:,} rows "
        f"waiting, the oldest {oldest} old; the outbox is empty again at "
        f"{info['cleared_at']:%Y-%m-%d %H:%M} UTC"
    )


def _departures(arrivals: Ints, reopen: int, rate: float | None) -> Ints:
    """When each row (in write order) is sent: not before ``reopen``, one every 1/rate seconds.

    A FIFO queue with a constant-rate server: d_i = max(a_i', d_{i-1} + s) with a_i' =
    max(a_i, reopen), whose closed form d_i = (i+1)·s + max_{j<=i}(a_j' - j·s) is one
    cumulative maximum (no loop over rows).
    """
    ready = np.maximum(arrivals, reopen)
    if rate is None or len(ready) == 0:
        return ready
    service = round(1e9 / rate)
    index = np.arange(len(ready), dtype=np.int64)
    return np.maximum.accumulate(ready - index * service) + (index + 1) * service


def _cleared_at(arrivals: Ints, sent: Ints, queued: int, reopen: int) -> int:
    """When the outbox is first empty again after the outage: the send of the row after which
    the next row finds nothing ahead of it (or the last send)."""
    if queued == 0:
        return reopen
    after = np.flatnonzero(sent[queued - 1 : -1] <= arrivals[queued:])
    return int(sent[queued - 1 + after[0]]) if len(after) else int(sent[-1])


def _grid_step(span: int, freq: str | timedelta | None) -> int:
    if freq is not None:
        step = _td_int(pd.Timedelta(freq))
        if step <= 0:
            raise ConfigError(f"cannot simulate on a grid of {freq!r}: give a positive step")
        return step
    return max(span // 200, 10**9)


__all__ = [
    "BACKLOG_COLUMNS",
    "DAILY_COLUMNS",
    "Policy",
    "as_policy",
    "daily",
    "describe_outage",
    "kept",
    "lost_conversations",
    "outage_backlog",
    "refused_parks",
]
