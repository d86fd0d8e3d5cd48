"""The thread ledger capability: who runs a thread, its declared retention, its mark, its lease.

A store that keeps a ledger sets ``store.ledger`` to a subclass of :class:`Ledger` that
implements its primitives. The ledger's fields reach readers through the core contract's
thread records (:meth:`Store.thread`), which the backend fills from the same records.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durability.errors import ConfigError, InvalidIdError
from durability.model import Lease, ThreadRecord
from durability.settings import Retention, due_at, parse_duration
from durability.stores.capability import Capability
from durability.stores.ids import check_id, check_thread

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class RunStart:
    """One run start for :meth:`Ledger.record_run_starts`: what :meth:`Ledger.record_run_start`
    takes for one thread."""

    thread_id: str
    run_id: str
    owner: str
    retention: Retention | None = None


class Ledger(Capability, ABC):
    """Run starts, finished marks and leases of a store's threads."""

    def record_run_start(
        self,
        thread_id: str,
        *,
        run_id: str,
        owner: str,
        retention: Retention | None = None,
    ) -> ThreadRecord:
        """Record a run starting on the thread: its owner and declared retention.

        A later run on the same thread replaces the declared retention. This does not touch
        the finished mark; consumers call :meth:`unmark_finished` themselves.
        """
        action = "record a run start"
        check_thread(thread_id, "", action)
        check_id(run_id, "run_id", action=action, allow_empty=True)
        check_id(owner, "owner", action=action, allow_empty=True)
        self.store.ready()
        self.store.refuse_erased(thread_id, action)
        self._start(thread_id, run_id, owner, retention or Retention(), self.store.clock())
        return self._record(thread_id)

    def mark_finished(self, thread_id: str) -> ThreadRecord:
        """Put the thread in the finished set, due from the retention in force now."""
        check_thread(thread_id, "", "mark a thread finished")
        self.store.ready()
        now = self.store.clock()
        declared = retention_of(self.store.thread(thread_id))
        self._mark(thread_id, now, due_at(self.store.settings, declared, now))
        return self._record(thread_id)

    def record_run_starts(self, starts: Sequence[RunStart]) -> int:
        """Record several run starts at the store's clock: :meth:`record_run_start` for each,
        written together (SQL: one transaction, all or none) and not read back.

        For writers of many threads at once (an import, the demo's fleet): a thread's record
        is not returned, which is what makes it one write instead of a write and a read per
        thread. If any thread is erased, the refusal names it and nothing is written. A thread
        listed twice keeps its last start. Returns how many threads were recorded.
        """
        action = "record run starts"
        latest = {s.thread_id: s for s in starts}
        for start in latest.values():
            check_thread(start.thread_id, "", action)
            check_id(start.run_id, "run_id", action=action, allow_empty=True)
            check_id(start.owner, "owner", action=action, allow_empty=True)
        self.store.ready()
        if latest:
            self._start_many(list(latest.values()), self.store.clock(), action)
        return len(latest)

    def mark_finished_many(self, thread_ids: Sequence[str]) -> int:
        """Put several threads in the finished set at the store's clock: :meth:`mark_finished`
        for each (each due from its own declared retention), written together and not read
        back. Returns how many threads were marked."""
        action = "mark threads finished"
        ids = list(dict.fromkeys(thread_ids))
        for thread_id in ids:
            check_thread(thread_id, "", action)
        self.store.ready()
        if not ids:
            return 0
        now = self.store.clock()
        declared = self._declared(ids)
        settings = self.store.settings
        self._mark_many([(t, now, due_at(settings, declared.get(t), now)) for t in ids])
        return len(ids)

    def unmark_finished(self, thread_id: str) -> None:
        """Take the thread out of the finished set (a no-op if it is not in it)."""
        check_thread(thread_id, "", "unmark a finished thread")
        self.store.ready()
        self._unmark(thread_id)

    def acquire_lease(
        self, thread_id: str, holder: str, ttl: timedelta | str, *, run_id: str = ""
    ) -> Lease:
        """Take the thread's lease for ``ttl``; :class:`~durability.errors.LeaseHeld` if
        another holds a live one. The same holder may take it again (that renews it)."""
        action = "take a lease"
        span = self._check_lease(thread_id, holder, ttl, action)
        self.store.refuse_erased(thread_id, action)
        now = self.store.clock()
        return self._acquire(thread_id, holder, run_id, now, _after(now, span, action))

    def renew_lease(self, thread_id: str, holder: str, ttl: timedelta | str) -> Lease:
        """Extend the caller's lease; :class:`~durability.errors.LeaseLost` if it is not
        theirs any more."""
        action = "renew a lease"
        span = self._check_lease(thread_id, holder, ttl, action)
        now = self.store.clock()
        return self._renew(thread_id, holder, now, _after(now, span, action))

    def release_lease(self, thread_id: str, holder: str) -> None:
        """Drop the caller's lease (a no-op if it is not theirs)."""
        check_thread(thread_id, "", "release a lease")
        check_id(holder, "lease holder", action="release a lease")
        self.store.ready()
        self._release(thread_id, holder)

    def finished_due(self, now: datetime | None = None) -> list[ThreadRecord]:
        """Threads marked finished whose due time is at or before ``now``, earliest due first.

        What the sweep deletes first. Backends answer it from an index of the finished set;
        the default walks every thread.
        """
        self.store.ready()
        found = self._finished_due(now or self.store.clock())
        return sorted(found, key=lambda r: (r.due_at, r.thread_id))

    def _check_lease(
        self, thread_id: str, holder: str, ttl: timedelta | str, action: str
    ) -> timedelta:
        """``ttl`` as a positive duration (a timedelta, or text such as ``30s`` or ``PT30S``)."""
        check_thread(thread_id, "", action)
        check_id(holder, "lease holder", action=action)
        if isinstance(ttl, str):
            ttl = parse_duration(ttl, name="lease ttl")
        elif not isinstance(ttl, timedelta):
            raise ConfigError(
                f"cannot {action}: lease ttl {str(ttl)[:40]!r} must be a timedelta or a duration "
                "such as 30s or 5m"
            )
        if ttl <= timedelta(0):
            raise InvalidIdError(f"cannot {action}: lease ttl {ttl} must be positive")
        self.store.ready()
        return ttl

    def _record(self, thread_id: str) -> ThreadRecord:
        record = self.store.thread(thread_id)
        assert record is not None
        return record

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        """Record the run start (owner, run, time, declared retention), replacing an earlier one."""

    @abstractmethod
    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        """Record the finished mark and its due time."""

    @abstractmethod
    def _unmark(self, thread_id: str) -> None:
        """Clear the finished mark (a no-op without one)."""

    @abstractmethod
    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        """Atomically take the lease unless another holder's lease is live at ``now``
        (:class:`~durability.errors.LeaseHeld`, naming the holder)."""

    @abstractmethod
    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        """Atomically extend the lease if ``holder`` still holds it, else
        :class:`~durability.errors.LeaseLost`."""

    @abstractmethod
    def _release(self, thread_id: str, holder: str) -> None:
        """Drop the lease if ``holder`` holds it."""

    def _start_many(self, starts: list[RunStart], now: datetime, action: str) -> None:
        """Record each start (threads unique); refuse before writing any if one is erased.
        Backends that can write them in one transaction override this."""
        for start in starts:
            self.store.refuse_erased(start.thread_id, action)
        for start in starts:
            self._start(
                start.thread_id, start.run_id, start.owner, start.retention or Retention(), now
            )

    def _declared(self, thread_ids: list[str]) -> dict[str, Retention | None]:
        """The declared retention each thread's ledger record holds (absent: ``None``)."""
        return {t: retention_of(self.store.thread(t)) for t in thread_ids}

    def _mark_many(self, marks: list[tuple[str, datetime, datetime]]) -> None:
        """Record each ``(thread, finished_at, due)`` mark; backends override to write them at once."""
        for thread_id, finished_at, due in marks:
            self._mark(thread_id, finished_at, due)

    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        return [r for r in self.store.iter_threads() if r.due_at is not None and r.due_at <= now]


def _after(now: datetime, span: timedelta, action: str) -> datetime:
    """``now + span``, refused by name when it passes the year 9999."""
    try:
        return now + span
    except OverflowError:
        raise ConfigError(
            f"cannot {action}: {span} from {now.isoformat()} is past the year 9999; use a "
            "shorter duration"
        ) from None


def retention_of(record: ThreadRecord | None) -> Retention | None:
    """The declared retention recorded in a thread's ledger record, if any."""
    if record is None or (record.declared_waiting is None and record.declared_finished is None):
        return None
    return Retention(waiting=record.declared_waiting, finished=record.declared_finished)


def lease_held_message(thread_id: str, current: Lease) -> str:
    """The refusal for a lease another holder has."""
    return (
        f"cannot take the lease on thread {thread_id[:80]!r}: {current.holder!r} holds it until "
        f"{current.expires_at.isoformat()} (run {current.run_id!r}); wait for that run to end or "
        "its lease to expire"
    )


def lease_lost_message(thread_id: str, holder: str, current: Lease | None) -> str:
    """The refusal for renewing a lease the caller no longer holds."""
    now_held = f"{current.holder!r} holds it now" if current else "nobody holds it now"
    return (
        f"cannot renew the lease on thread {thread_id[:80]!r} for {holder!r}: the lease was lost "
        f"({now_held}); stop this run, it may be running elsewhere"
    )
