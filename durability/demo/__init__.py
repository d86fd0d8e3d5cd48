"""The demo fleet: weeks of real runs written by the durable runner, replicated to a real plane.

:func:`build_demo` drives the runners below against a store whose clock it moves forward through
a schedule of events, so the fleet spreads over weeks in the order things happened: publishing
runs that completed, failed (one of them resumed to completion afterwards), were stopped mid-run,
parked on an approval (some aborted by an operator, some never answered), conversations whose
turns come days apart, support flows that own a session thread per flow run and declare their
own retention, and ingest runs whose documents are bigger than the plane accepts. Every
checkpoint, park, lease and ledger mark in it was written by the runner itself, so every view of
the bundle shows true data.

:func:`build_fleet` is what ``durability demo`` runs: that fleet on the embedded SQLite default,
replicated to the project's plane served for real on loopback (the drain runs every few hours of
the fleet's clock; the plane is down for maintenance for two days, and refuses the oversized
ingest rows, which are quarantined), plus an edge worker's store that is lost (its file deleted)
and brought back from the plane with :mod:`durability.restore`. With ``threads=N`` it adds N
background conversations (:class:`~durability.demo.traffic.Traffic`: weekly seasons and bursts,
heavy-tailed sizes with a few multi-MiB attachments the plane refuses, idle gaps from hours to
weeks) over ``days`` days; ``durability demo`` builds 2000 over 90 days.

The runners are importable for ``durability resume``::

    durability resume sqlite:///durability-out/demo.db THREAD --single-worker \
        --runner durability.demo:publish --value '{"approved": true}'
"""

from __future__ import annotations

from durability.demo.fleet import (
    DEMO_DOMAIN,
    DEMO_STATE_CAP,
    KEY_ENV,
    LAST_DRAIN_BEFORE_END,
    MAINTENANCE,
    MANIFEST,
    PROJECTS,
    DemoPlane,
    Fleet,
    Maintenance,
    Ticket,
    assistant,
    build_fleet,
    edge_runs,
    langgraph_store,
    log,
    notebook_parameters,
    publish,
    run_notebooks,
    serve_demo_plane,
    support,
)
from durability.demo.history import (
    CONVERSATIONS,
    DEMO_DAYS,
    DEMO_START,
    DRAIN_EVERY,
    INGESTS,
    PUBLISH_KINDS,
    SUPPORT_SESSIONS,
    Event,
    build_demo,
)
from durability.demo.runners import (
    Pace,
    State,
    assistant_runner,
    ingest_runner,
    publish_runner,
    support_flow,
)

__all__ = [
    "CONVERSATIONS",
    "DEMO_DAYS",
    "DEMO_DOMAIN",
    "DEMO_START",
    "DEMO_STATE_CAP",
    "DRAIN_EVERY",
    "INGESTS",
    "KEY_ENV",
    "LAST_DRAIN_BEFORE_END",
    "MAINTENANCE",
    "MANIFEST",
    "PROJECTS",
    "PUBLISH_KINDS",
    "SUPPORT_SESSIONS",
    "DemoPlane",
    "Event",
    "Fleet",
    "Maintenance",
    "Pace",
    "State",
    "Ticket",
    "assistant",
    "assistant_runner",
    "build_demo",
    "build_fleet",
    "edge_runs",
    "ingest_runner",
    "langgraph_store",
    "log",
    "notebook_parameters",
    "publish",
    "publish_runner",
    "run_notebooks",
    "serve_demo_plane",
    "support",
    "support_flow",
]
