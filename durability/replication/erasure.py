"""Erasure reaches the plane: the request rides the outbox, with the same no-loss rules as rows.

:func:`erase_thread` erases the thread from the store (:meth:`Store.erase`), queues one erase
request per plane project the store replicates to (and the one a caller's client names), and
sends what it can at once. A request the plane does not answer (down, 401/403 — a key without
the erase permission —, 429, 5xx) stays queued and the drain sends it when the plane takes it;
a plane without the erase route (404/405) gets nothing to wait for, and the receipt says its
copy remains. Every answer is written into the tombstone's receipt, so ``frames.erasures``
shows the plane's part once it is known; an answered request leaves the store with its thread
id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durability.replication.client import EraseAnswer, PlaneClient
from durability.stores.erasure import ErasureReceipt

if TYPE_CHECKING:
    from durability.stores.base import Store

log = logging.getLogger("durability.replication")

ERASED = "erased"
QUEUED = "queued: the plane did not take the request; it waits in the outbox and is sent when the plane answers"
REMAINS = "not erased: the plane has no erase route, so its copy remains; erase it there by hand"


@dataclass(slots=True)
class EraseReport:
    """What one pass over a project's queued erase requests did."""

    erased: int = 0
    remains: int = 0
    queued: int = 0
    last_error: str | None = None


def erase_thread(
    store: Store,
    thread_id: str,
    *,
    by: str = "",
    client: PlaneClient | None = None,
    project_id: str = "",
) -> ErasureReceipt:
    """Erase the thread from the store and ask every plane it replicates to (and ``client``'s).

    ``client`` (the CLI's ``--plane``) is asked at once for ``project_id``; the store's recorded
    connections are asked through this process's active connections, else by their drain. The
    receipt's ``plane`` says, per project, ``erased`` (with what the plane removed), ``queued``
    or that the plane's copy remains.
    """
    receipt = store.erase(thread_id, by=by)
    assert store.tombstones is not None
    projects = {c.project_id: c.target for c in store.connections()} if store.outbox else {}
    if client is not None:
        projects[project_id] = client.target
    if not projects:
        return receipt
    for project in projects:
        store.tombstones.queue_request(thread_id, project)
    clients: dict[str, PlaneClient] = {}
    if client is not None:
        clients[project_id] = client
    for conn in _active_connections(store):
        clients.setdefault(conn.project_id, conn.client)
    for project, plane in clients.items():
        send_erase_requests(store, plane, project)
    waiting = {r.project_id for r in store.tombstones.requests() if r.thread_id == thread_id}
    for project in waiting:
        _record(store, thread_id, project, {"status": QUEUED, "target": projects[project]})
    stone = store.tombstones.get(thread_id)
    if stone is not None and stone.receipt:
        return receipt.with_plane(ErasureReceipt.from_json(stone.receipt).plane)
    return receipt


def send_erase_requests(store: Store, client: PlaneClient, project_id: str) -> EraseReport:
    """Send the project's queued erase requests, oldest first, until the plane stops answering."""
    report = EraseReport()
    if store.tombstones is None:
        return report
    for request in store.tombstones.requests(project_id):
        answer = client.erase(request.thread_id)
        if answer.outcome == "buffered":
            store.tombstones.record_request_attempt(request, answer.reason)
            report.queued += 1
            report.last_error = answer.reason
            log.warning("an erase request waits for the plane %s: %s", client.target, answer.reason)
            break
        _record(store, request.thread_id, project_id, _answered(answer, client.target))
        store.tombstones.finish_request(request)
        if answer.outcome == "erased":
            report.erased += 1
        else:
            report.remains += 1
    return report


def _answered(answer: EraseAnswer, target: str) -> dict[str, Any]:
    if answer.outcome == "no_route":
        return {"status": REMAINS, "target": target, "reason": answer.reason}
    body = answer.body
    return {
        "status": ERASED,
        "target": target,
        "removed": body.get("removed"),
        "tombstone": body.get("tombstone"),
        "erased_at": body.get("erased_at"),
        "already_erased": body.get("already_erased"),
    }


def _record(store: Store, thread_id: str, project_id: str, detail: dict[str, Any]) -> None:
    """Write the plane's answer for ``project_id`` into the tombstone's receipt."""
    assert store.tombstones is not None
    stone = store.tombstones.get(thread_id)
    if stone is None or not stone.receipt:
        return
    receipt = ErasureReceipt.from_json(stone.receipt)
    projects = dict(receipt.plane.get("projects", {}))
    projects[project_id] = detail
    statuses = {p["status"] for p in projects.values()}
    overall = QUEUED if QUEUED in statuses else REMAINS if REMAINS in statuses else ERASED
    plane = {"status": overall, "projects": projects}
    store.tombstones.record_receipt(thread_id, receipt.with_plane(plane).to_json())


def _active_connections(store: Store) -> list[Any]:
    from durability.replication import connection

    key = connection.database_key(store)
    return [
        c
        for c in connection.active_connections()
        if c.active and connection.database_key(c.store) == key
    ]
