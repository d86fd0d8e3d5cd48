"""A store's outbox, per project, for people: counts, the oldest pending row, and whether a
drain is alive — what ``durability outbox status`` and the ops metrics show."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability.stores.base import Store
from durability.stores.outbox import RowKey

if TYPE_CHECKING:
    pass


#: A drain writes its heartbeat at least this often while its process lives (its idle pass
#: every 30 s, a backoff step at most every 60 s, a long pass every batch), so a record older
#: than this was left by a process that has gone.
DRAIN_STALE_AFTER = timedelta(minutes=3)


@dataclass(frozen=True, slots=True)
class ProjectOutbox:
    """One project's outbox in a store: counts and sizes, the oldest pending row, and its
    connection with its drain's heartbeat (``seen_at``) and last acknowledged batch."""

    project_id: str
    pending: int
    synced: int
    quarantined: int
    oldest_pending_at: datetime | None
    connected_to: str | None
    disconnected_at: datetime | None = None
    pending_bytes: int = 0
    seen_at: datetime | None = None
    acked_at: datetime | None = None
    #: Erasures waiting for this project's plane (sent by its drain; see ``erase_thread``).
    erasures: int = 0

    @property
    def connection(self) -> str:
        """``connected``, ``disconnected`` (recorded, closed: its rows wait for the next
        connect) or ``none`` (never connected, or forgotten)."""
        if self.connected_to is None:
            return "none"
        return "connected" if self.disconnected_at is None else "disconnected"

    def drain(self, now: datetime) -> str | None:
        """For a connected project, ``live`` (its drain's heartbeat is recent) or ``stale``
        (older than :data:`DRAIN_STALE_AFTER`: the process that connected has gone); else ``None``."""
        if self.connection != "connected" or self.seen_at is None:
            return None if self.connection != "connected" else "stale"
        return "live" if now - self.seen_at <= DRAIN_STALE_AFTER else "stale"


def outbox_status(store: Store, *, page_size: int = 10_000) -> list[ProjectOutbox]:
    """Per project: pending (with their stored bytes), synced and quarantined rows, the oldest
    pending row's time, the plane it replicates to (``None``: no connection recorded, so its
    rows stay buffered), when its connection closed (``None`` while open), its drain's last
    heartbeat, the plane's last acknowledged batch and the erasures waiting for the plane.

    Raises:
        CapabilityError: The store keeps no outbox.
    """
    outbox = store.outbox
    if outbox is None:
        raise store.missing("outbox", "read the outbox status")
    counts: dict[str, list[Any]] = {}
    after: int | None = None
    while True:
        page = outbox.entries(after_seq=after, limit=page_size)
        for e in page:
            c = counts.setdefault(e.project_id, [0, 0, 0, None, 0])
            c[("pending", "synced", "quarantined").index(e.state)] += 1
            if e.state == "pending":
                c[4] += e.size_bytes
                if c[3] is None or e.created_at < c[3]:
                    c[3] = e.created_at
        if len(page) < page_size:
            break
        after = page[-1].seq
    records = {c.project_id: c for c in outbox.connections()}
    for project in records:
        counts.setdefault(project, [0, 0, 0, None, 0])
    waiting: dict[str, int] = {}
    for request in store.tombstones.requests() if store.tombstones is not None else ():
        waiting[request.project_id] = waiting.get(request.project_id, 0) + 1
        counts.setdefault(request.project_id, [0, 0, 0, None, 0])
    status = []
    for project, (pending, synced, quarantined, oldest, size) in sorted(counts.items()):
        record = records.get(project)
        status.append(
            ProjectOutbox(
                project,
                pending,
                synced,
                quarantined,
                oldest,
                None if record is None else record.target,
                None if record is None else record.disconnected_at,
                size,
                None if record is None else (record.seen_at or record.connected_at),
                None if record is None else record.acked_at,
                waiting.get(project, 0),
            )
        )
    return status


def keys_of(entries: Iterable[Any]) -> list[RowKey]:
    """Row keys of outbox entries (for ``mark_synced``, ``release`` …)."""
    return [(e.thread_id, e.seq) for e in entries]


__all__ = ["DRAIN_STALE_AFTER", "ProjectOutbox", "keys_of", "outbox_status"]


def draining_projects(store: Store) -> set[str]:
    """The projects of ``store`` a drain is running for: in this process (an open connection of
    its database), or in another whose heartbeat in the store's connection record is recent."""
    from durability.replication.connection import active_connections, database_key

    key = database_key(store)
    here = {c.project_id for c in active_connections() if database_key(c.store) == key}
    now = store.clock()
    return here | {s.project_id for s in outbox_status(store) if s.drain(now) == "live"}


def describe_drains(store: Store, projects: Iterable[str]) -> str:
    """For people: whether a drain is running to send ``projects``' pending rows of ``store``."""
    running = draining_projects(store)
    live = [repr(p) for p in projects if p in running]
    idle = [repr(p) for p in projects if p not in running]
    parts = []
    if live:
        parts.append(f"A drain is running for {', '.join(live)}: it sends them now.")
    if idle:
        parts.append(
            f"No drain is running for {', '.join(idle)}: they stay pending until a worker connects."
        )
    return " ".join(parts)
