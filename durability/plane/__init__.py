"""The reference plane: a passive replica that ingests checkpoints and serves them back.

``durability plane serve`` runs it; :func:`create_app` gives the ASGI application;
:class:`PlaneStorage` is its database (SQLite by default, Postgres for real use). It speaks the
fastaiagent public API, so the fastaiagent SDK connects, replicates and restores against it
unchanged. It never runs agent code.
"""

from __future__ import annotations

from durability.plane.app import Plane, PlaneCaps, create_app
from durability.plane.server import RunningPlane, serve_in_thread
from durability.plane.storage import NewKey, PlaneStorage, Tenant, hash_key

__all__ = [
    "NewKey",
    "Plane",
    "PlaneCaps",
    "PlaneStorage",
    "RunningPlane",
    "Tenant",
    "create_app",
    "hash_key",
    "serve_in_thread",
]
