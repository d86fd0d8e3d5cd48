"""The outbox capability: which checkpoints the plane has, and which planes the store feeds.

A store that replicates sets ``store.outbox`` to a subclass of :class:`Outbox`. Each row
written with ``synced=False`` is pending until the drain marks it synced (the plane has it) or
quarantined (the plane refused it on payload grounds, with its reason). A store without an
outbox does not replicate, which is never an error for its callers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability.errors import InvalidIdError
from durability.model import Checkpoint, OutboxEntry
from durability.stores.capability import Capability
from durability.stores.ids import check_id, check_thread
from durability.stores.rows import EncodedCheckpoint

if TYPE_CHECKING:
    pass

#: An outbox row's identity: the thread and the checkpoint's ``seq``.
RowKey = tuple[str, int]

#: The states an outbox row is in.
OUTBOX_STATES = ("pending", "synced", "quarantined")


@dataclass(frozen=True, slots=True)
class PendingSpan:
    """A time a row was pending that its current state no longer shows: from ``pending_from``
    (its write, or an earlier release) to ``pending_until`` (its quarantine), recorded at
    ``released_at``. ``created_at`` is the row's write time (its age while pending)."""

    project_id: str
    created_at: datetime
    pending_from: datetime
    pending_until: datetime
    size_bytes: int
    released_at: datetime


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    """A store's record that it replicates a project to a plane (no secret is kept).

    A disconnect keeps the record, with ``disconnected_at`` set: the rows the plane does not
    have yet still belong to it and are sent at the next connect. Only an operator's
    ``durability outbox forget`` removes it.
    """

    project_id: str
    target: str
    connected_at: datetime
    disconnected_at: datetime | None = None
    #: When a drain of the project last ran (its heartbeat; a crash leaves it to age).
    seen_at: datetime | None = None
    #: When the plane last acknowledged a batch of the project's rows.
    acked_at: datetime | None = None

    @property
    def open(self) -> bool:
        """Whether a process is connected (as far as the record knows: a crash leaves it open)."""
        return self.disconnected_at is None


@dataclass(frozen=True, slots=True)
class OutboxSummary:
    """One project's unsent rows, counted without reading the synced ones: pending rows and
    their stored bytes, the oldest pending row's time, and quarantined rows."""

    project_id: str
    pending: int = 0
    pending_bytes: int = 0
    oldest_pending_at: datetime | None = None
    quarantined: int = 0


@dataclass(frozen=True, slots=True)
class EntryQuery:
    """Which outbox entries :meth:`Outbox._entries` returns (``None``: any)."""

    state: str | None = None
    project_id: str | None = None
    thread_id: str | None = None
    after_seq: int | None = None
    limit: int | None = None


class Outbox(Capability, ABC):
    """The replication state of a store's checkpoints and its connection records."""

    def fetch_unsynced(
        self, *, limit: int = 200, max_bytes: int | None = None, project_id: str | None = None
    ) -> list[Checkpoint]:
        """The oldest un-replicated checkpoints (write order), at most ``limit`` rows.

        ``max_bytes`` caps the batch by ``size_bytes`` (the first row always fits);
        ``project_id`` limits it to one project.
        """
        rows = self.fetch_unsynced_encoded(limit=limit, max_bytes=max_bytes, project_id=project_id)
        return [row.decode() for row in rows]

    def fetch_unsynced_encoded(
        self,
        *,
        limit: int = 200,
        max_bytes: int | None = None,
        project_id: str | None = None,
        exclude: Collection[RowKey] = (),
    ) -> list[EncodedCheckpoint]:
        """:meth:`fetch_unsynced` without decoding: the rows as stored (payloads as codec text).

        The replication drain sends these texts as they are, so a row is never decoded (and a
        class in its state never needs to be importable) on its way to the plane. Rows in
        ``exclude`` are skipped: the drain fetches the next batch while one is in flight.
        """
        self.store.ready()
        return cap_bytes(self._fetch(limit, project_id, exclude), max_bytes)

    def mark_synced(self, keys: Iterable[RowKey]) -> None:
        """Record that the plane has these rows (idempotent)."""
        self.store.ready()
        self._mark_synced(list(keys), self.store.clock())

    def mark_sent(self, keys: Iterable[RowKey]) -> None:
        """Record that one request delivered these rows: :meth:`record_attempt` without an
        error and :meth:`mark_synced`, in one write where the store can (the drain's ack)."""
        self.store.ready()
        self._mark_sent(list(keys), self.store.clock())

    def mark_quarantined(self, reasons: Mapping[RowKey, str]) -> None:
        """Record rows the plane refused on payload grounds, with its reason (idempotent)."""
        self.store.ready()
        self._mark_quarantined(dict(reasons), self.store.clock())

    def record_attempt(self, keys: Iterable[RowKey], error: str | None) -> None:
        """Count one send attempt on these rows, with the error it met (``None``: it went through)."""
        self.store.ready()
        self._record_attempt(list(keys), error)

    def release(self, keys: Iterable[RowKey] | None = None) -> int:
        """Put quarantined rows back in the outbox (all of them when ``keys`` is ``None``).

        What happened stays on record: each released row's time pending before its quarantine
        is kept as a :class:`PendingSpan` (:meth:`history`), and the row is pending again from
        now (``OutboxEntry.pending_since``), so a backlog of the past never changes.
        """
        self.store.ready()
        return self._release(None if keys is None else list(keys), self.store.clock())

    def history(self) -> list[PendingSpan]:
        """The spans released rows spent pending before their quarantine, oldest release first.

        Anonymous (no thread or checkpoint id): a thread deleted later leaves its spans, which
        name no one. Empty for a store that keeps no history.
        """
        self.store.ready()
        return self._history()

    def _history(self) -> list[PendingSpan]:
        """The stored spans (a store that keeps none returns ``[]``)."""
        return []

    def entries(
        self,
        *,
        state: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[OutboxEntry]:
        """Outbox entries (no payloads) in write order; ``state`` is pending, synced or quarantined."""
        if state is not None and state not in OUTBOX_STATES:
            raise InvalidIdError(
                f"cannot list the outbox: state={state!r} is not one of {', '.join(OUTBOX_STATES)}"
            )
        if thread_id is not None:
            check_thread(thread_id, "", "list the outbox")
        self.store.ready()
        return self._entries(EntryQuery(state, project_id, thread_id, after_seq, limit))

    __call__ = entries  # ``store.outbox(state=…)`` reads as it did when it was a store method

    def unreplicated(self) -> dict[str, int]:
        """Per thread, how many of its checkpoints the plane does not have (pending or
        quarantined); only threads with at least one such row appear."""
        self.store.ready()
        return self._unreplicated()

    def record_connection(self, project_id: str, target: str) -> None:
        """Record that this store replicates ``project_id`` to ``target`` (never the key)."""
        check_id(project_id, "project_id", action="record a connection", allow_empty=True)
        self.store.ready()
        self._record_connection(ConnectionRecord(project_id, target, self.store.clock()))

    def record_disconnection(self, project_id: str) -> None:
        """Mark ``project_id``'s connection closed, keeping the record (a no-op without one).

        The store still replicates: what the plane lacks waits for the next connect, and the
        sweep and ``durability threads delete`` keep it meanwhile.
        """
        self.store.ready()
        for record in self._connections():
            if record.project_id == project_id:
                self._record_connection(replace(record, disconnected_at=self.store.clock()))

    def forget_connection(self, project_id: str) -> None:
        """Remove the record of a connection: the operator gives up replicating that project.

        Once no record is left the store no longer replicates, and nothing keeps the rows the
        plane lacks from the sweep, ``durability threads delete`` or Redis's TTL.
        """
        self.store.ready()
        self._forget_connection(project_id)

    def connections(self) -> list[ConnectionRecord]:
        """The projects this store replicates: every connection recorded, open or closed."""
        self.store.ready()
        return self._connections()

    def record_heartbeat(self, project_id: str, *, acked_at: datetime | None = None) -> None:
        """Record that a drain of ``project_id`` is alive now (and, with ``acked_at``, when the
        plane last acknowledged its rows) in the connection's record; a no-op without one."""
        self.store.ready()
        self._record_heartbeat(project_id, self.store.clock(), acked_at)

    def summary(self) -> list[OutboxSummary]:
        """Per project, its pending and quarantined rows (see :class:`OutboxSummary`), read
        without touching synced rows: cheap enough to serve on every metrics scrape."""
        self.store.ready()
        return self._summary()

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _fetch(
        self, limit: int, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        """The oldest pending rows (write order), at most ``limit``, skipping ``exclude``."""

    @abstractmethod
    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        """Mark rows synced at ``now``, clearing any quarantine reason."""

    def _mark_sent(self, keys: list[RowKey], now: datetime) -> None:
        # Two writes by default; a store that can flip both in one statement overrides this.
        self._record_attempt(keys, None)
        self._mark_synced(keys, now)

    @abstractmethod
    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        """Mark rows quarantined with the plane's reason."""

    @abstractmethod
    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        """Add one to the rows' attempts and record ``error`` as their last error."""

    @abstractmethod
    def _release(self, keys: list[RowKey] | None, now: datetime) -> int:
        """Make quarantined rows pending again from ``now`` (all of them for ``None``), keeping
        each one's span pending before its quarantine (:meth:`history`); how many."""

    @abstractmethod
    def _entries(self, query: EntryQuery) -> list[OutboxEntry]:
        """Entries in write order, filtered as asked."""

    @abstractmethod
    def _record_connection(self, connection: ConnectionRecord) -> None:
        """Insert or replace the record of ``connection.project_id``."""

    @abstractmethod
    def _forget_connection(self, project_id: str) -> None:
        """Remove the project's record (a no-op without one)."""

    @abstractmethod
    def _connections(self) -> list[ConnectionRecord]:
        """Every record, by project id."""

    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        for record in self._connections():
            if record.project_id == project_id:
                acked = acked_at or record.acked_at
                self._record_connection(replace(record, seen_at=seen_at, acked_at=acked))

    def _summary(self) -> list[OutboxSummary]:
        totals: dict[str, list[Any]] = {}
        for state in ("pending", "quarantined"):
            for e in self._entries(EntryQuery(state)):
                t = totals.setdefault(e.project_id, [0, 0, None, 0])
                if state == "quarantined":
                    t[3] += 1
                    continue
                t[0] += 1
                t[1] += e.size_bytes
                t[2] = e.created_at if t[2] is None else min(t[2], e.created_at)
        return [OutboxSummary(p, *t) for p, t in sorted(totals.items())]

    def _unreplicated(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in ("pending", "quarantined"):
            for entry in self._entries(EntryQuery(state)):
                counts[entry.thread_id] = counts.get(entry.thread_id, 0) + 1
        return counts


def cap_bytes(rows: list[EncodedCheckpoint], max_bytes: int | None) -> list[EncodedCheckpoint]:
    """The longest prefix of ``rows`` within ``max_bytes`` of ``size_bytes``; the first row always fits."""
    if max_bytes is None:
        return rows
    kept: list[EncodedCheckpoint] = []
    total = 0
    for row in rows:
        if kept and total + row.size_bytes > max_bytes:
            break
        kept.append(row)
        total += row.size_bytes
    return kept
