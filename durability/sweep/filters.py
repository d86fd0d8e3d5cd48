"""The live-thread filters: who may claim a thread the sweep would delete, and the registry of them.

A filter is asked once, about the due threads only, before any delete; a thread one claims is
spared. The shipped filters claim a thread with an unexpired park, a live lease, or rows the
plane does not have yet in a store that replicates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, overload

from durability.clock import to_micros
from durability.errors import ConfigError
from durability.model import ThreadRecord
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.stores.scans import SweepColumns

if TYPE_CHECKING:
    pass


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

#: The filters the sweep asks, in order (the shipped three, then any registered).
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
