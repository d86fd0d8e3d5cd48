"""Replication: the outbox drain, the plane client and connections.

::

    import durability
    from durability import replication

    store = durability.open("sqlite:///durability.db")
    conn = replication.connect(store, "https://plane.example.com", api_key, project_id="shop")
    store.put(...)            # returns at once; the drain thread sends it
    replication.disconnect()  # drains synchronously (with a timeout), then lets go of the key

Restore builds on :class:`PlaneClient` (``latest``, ``history``, ``supports_history``) and on
:func:`checkpoint_from_wire`.
"""

from __future__ import annotations

from durability.replication.client import HistoryPage, IngestAnswer, PlaneClient, path_segment
from durability.replication.connection import (
    Connection,
    active_connections,
    connect,
    database_key,
    disconnect,
)
from durability.replication.erasure import EraseReport, erase_thread, send_erase_requests
from durability.replication.outbox import DrainReport, PlaneLimits, drain_once, supports_outbox
from durability.replication.status import (
    ProjectOutbox,
    describe_drains,
    draining_projects,
    outbox_status,
)
from durability.replication.wire import (
    CLEAR,
    CODEC_MARK,
    ClearPayload,
    PayloadEncoder,
    checkpoint_from_wire,
    checkpoint_to_wire,
    is_durability_item,
    resource_type,
    was_stripped,
)
from durability.replication.worker import Backoff, DrainWorker

__all__ = [
    "CLEAR",
    "CODEC_MARK",
    "Backoff",
    "ClearPayload",
    "Connection",
    "DrainReport",
    "DrainWorker",
    "EraseReport",
    "HistoryPage",
    "IngestAnswer",
    "PayloadEncoder",
    "PlaneClient",
    "PlaneLimits",
    "ProjectOutbox",
    "active_connections",
    "checkpoint_from_wire",
    "checkpoint_to_wire",
    "connect",
    "database_key",
    "describe_drains",
    "disconnect",
    "drain_once",
    "draining_projects",
    "erase_thread",
    "is_durability_item",
    "outbox_status",
    "path_segment",
    "resource_type",
    "send_erase_requests",
    "supports_outbox",
    "was_stripped",
]
