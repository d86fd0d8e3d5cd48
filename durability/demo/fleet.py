"""The whole demo: the fleet in a SQLite store replicated to a plane served on loopback, an edge
worker's store lost and restored, a LangGraph store beside it, and the notebooks executed on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from durability.clock import FrozenClock
from durability.demo.history import DEMO_DAYS, DRAIN_EVERY, build_demo
from durability.demo.runners import assistant_runner, publish_runner, support_flow
from durability.demo.traffic import Traffic
from durability.runs import RunContext
from durability.stores.base import Store

publish = publish_runner()


assistant = assistant_runner()


support = support_flow()


#: The demo plane's state cap: lower than the 1 MiB the workers are configured with, so the
#: plane itself refuses the ingest runs' rows (its operator lowered the cap).
DEMO_STATE_CAP = 128 * 1024


#: When the plane is down for maintenance (ingest answers 503), as days after the fleet's start.
MAINTENANCE = (24.0, 26.5)


#: The deployment's worker stops draining this long before the fleet's end (a deploy): rows
#: written since are still pending.
LAST_DRAIN_BEFORE_END = timedelta(hours=12)


#: The plane tenant of the demo: one domain, a project per store.
DEMO_DOMAIN = "demo"


PROJECTS = {"main": "demo.db", "edge": "edge.db"}


#: Environment variables the notebooks read the demo plane's keys from.
KEY_ENV = {"main": "DURABILITY_PLANE_API_KEY", "edge": "DURABILITY_EDGE_PLANE_API_KEY"}


MANIFEST = "demo.json"
#: The folder (in the demo's) where restore_runs.ipynb makes each run's copy of the edge store.
RESTORE_COPIES = "restore-copies"


log = logging.getLogger(__name__)


class Maintenance:
    """ASGI middleware: while ``down``, the plane's ingest door answers 503 (a maintenance window)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.down = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not (self.down and scope["type"] == "http" and scope["path"].endswith("/ingest")):
            await self.app(scope, receive, send)
            return
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"3600")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"detail": "down for maintenance"}'})


@dataclass
class DemoPlane:
    """The demo plane served on loopback, with a fresh API key per project (never printed)."""

    url: str
    db_url: str
    maintenance: Maintenance
    keys: dict[str, str] = field(repr=False)

    def env(self) -> dict[str, str]:
        """The environment variables that hand the keys to notebooks (:data:`KEY_ENV`)."""
        return {KEY_ENV[project]: key for project, key in self.keys.items()}


@contextmanager
def serve_demo_plane(out: Path) -> Iterator[DemoPlane]:
    """Serve the demo plane (its database ``out/plane.db``) on a free loopback port.

    A key per project is made through the plane's own storage for this serving only; the
    tenant and its data persist in the database, so ``durability lab`` serves the same plane.
    """
    from durability.plane import PlaneCaps, PlaneStorage, create_app, serve_in_thread

    db_url = f"sqlite:///{out.resolve() / 'plane.db'}"
    storage = PlaneStorage(db_url)
    try:
        keys = {
            project: storage.create_key(DEMO_DOMAIN, project, entitled=True).api_key
            for project in PROJECTS
        }
        maintenance = Maintenance(create_app(storage, caps=PlaneCaps(state_bytes=DEMO_STATE_CAP)))
        with serve_in_thread(maintenance) as running:
            yield DemoPlane(running.url, db_url, maintenance, keys)
    finally:
        storage.close()


@dataclass
class Fleet:
    """What :func:`build_fleet` built: the stores, the plane, and what happened to them."""

    out: Path
    store_url: str
    edge_url: str
    plane: DemoPlane
    start: datetime
    end: datetime
    lost_threads: list[str]
    restored_thread: str
    drains: dict[str, int]
    foreign_url: str | None = None

    def manifest(self) -> dict[str, Any]:
        """A JSON-ready description (no keys), written to ``out/demo.json``."""
        return {
            "store_url": self.store_url,
            "edge_url": self.edge_url,
            "plane_db": self.plane.db_url,
            "domain": DEMO_DOMAIN,
            "key_env": KEY_ENV,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "lost_threads": self.lost_threads,
            "restored_thread": self.restored_thread,
            "drains": self.drains,
            "foreign_url": self.foreign_url,
        }


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextmanager
def _quiet_runs() -> Iterator[None]:
    """The demo's failed runs fail on purpose, and its plane refuses on purpose: keep it quiet."""
    loggers = [logging.getLogger(name) for name in ("durability.runs", "durability.replication")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextmanager
def build_fleet(
    out: Path,
    *,
    end: datetime | None = None,
    days: float = DEMO_DAYS,
    threads: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Iterator[Fleet]:
    """Build the whole demo in ``out`` and keep its plane served while the context is open.

    1. The deployment's store (``out/demo.db``, SQLite, ``single_worker=True``): the fleet of
       :func:`build_demo` over ``days`` days (default :data:`DEMO_DAYS`) ending at ``end``
       (default: now, to the hour), with ``threads`` background conversations
       (:class:`~durability.demo.traffic.Traffic`: weekly seasons, bursts, heavy-tailed sizes,
       idle gaps from hours to weeks, a few multi-MiB attachments the plane refuses), drained
       to the plane every :data:`DRAIN_EVERY` of its clock, except during the
       :data:`MAINTENANCE` window (503) and after the last drain, :data:`LAST_DRAIN_BEFORE_END`
       before the end. The ingest runs' rows exceed the plane's state cap: the plane refuses
       them and they are quarantined with its reason.
    2. An edge worker's store (``out/edge.db``): a few runs in the last days, all replicated;
       then the file is deleted (the machine is lost), a fresh store is opened at the same path,
       the failed run is restored from the plane (plan, then apply) and resumed to completion.
       Its other threads stay on the plane only, for ``restore_runs.ipynb`` to bring back.
    """
    from durability import replication

    out.mkdir(parents=True, exist_ok=True)
    for name in (*PROJECTS.values(), "plane.db", "langgraph.db"):
        _remove_sqlite(out / name)
    end = end or datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=days)
    say = progress or (lambda _: None)
    say(
        f"building {days:g} days of the fleet ({start:%Y-%m-%d} to {end:%Y-%m-%d}) with "
        f"{threads:,} background conversations"
    )
    store_url = f"sqlite:///{(out / PROJECTS['main']).resolve()}"
    edge_path = (out / PROJECTS["edge"]).resolve()
    edge_url = f"sqlite:///{edge_path}"
    limits = replication.PlaneLimits()  # the documented 1 MiB: the workers' configuration

    with _quiet_runs(), serve_demo_plane(out) as plane:
        traffic = Traffic(start, days, threads)
        drains = _build_main(store_url, plane, traffic, (start, end), limits, say)
        say("the edge worker's store is lost and restored from the plane")
        lost, restored = _lose_and_restore_edge(edge_url, edge_path, plane, end, limits)
        foreign = langgraph_store(out / "langgraph.db")
        fleet = Fleet(out, store_url, edge_url, plane, start, end, lost, restored, drains, foreign)
        (out / MANIFEST).write_text(json.dumps(fleet.manifest(), indent=2) + "\n")
        yield fleet


def _build_main(
    store_url: str,
    plane: DemoPlane,
    traffic: Traffic,
    span: tuple[datetime, datetime],
    limits: Any,
    say: Callable[[str], None],
) -> dict[str, int]:
    """The deployment's store: the scripted fleet and the background traffic, drained to the
    plane every :data:`DRAIN_EVERY` but in the maintenance window and after the last drain.
    Returns the drain passes made and how many of them the plane refused something in."""
    import durability
    from durability import replication

    start, end = span
    days = (end - start) / timedelta(days=1)
    cutoff = end - LAST_DRAIN_BEFORE_END
    down = (start + timedelta(days=MAINTENANCE[0]), start + timedelta(days=MAINTENANCE[1]))
    drains = {"passes": 0, "refused": 0}
    clock = FrozenClock(start)
    with durability.open(store_url, clock=clock, single_worker=True) as store:
        conn = replication.connect(
            store, plane.url, plane.keys["main"], background=False, limits=limits
        )

        def drain(now: datetime) -> None:
            traffic.write_until(store, now)
            if now.hour < DRAIN_EVERY.total_seconds() // 3600 and (now - start).days % 10 == 0:
                say(f"day {(now - start).days:>3}/{days:g}: {traffic.written:,} conversation turns")
            if not conn.active:
                return
            plane.maintenance.down = down[0] <= now < down[1]
            report = replication.drain_once(conn)
            drains["passes"] += 1
            drains["refused"] += bool(report.buffered)
            if now + DRAIN_EVERY > cutoff:
                conn.close()  # the worker is redeployed: this was its last drain

        build_demo(store, clock, start=start, days=days, on_tick=drain)
        traffic.write_until(store, end)
        plane.maintenance.down = False
        if conn.active:
            conn.close()
        clock.set(end)
        # The deployment's worker keeps the store connected; the record says it replicates.
        store.record_connection("", plane.url)
    return drains


def edge_runs(store: Store, clock: FrozenClock, end: datetime) -> dict[str, str]:
    """The edge worker's runs in its last three days before ``end``, written into ``store``.

    Returns their threads by kind: ``completed``, ``failed`` (its review timed out),
    ``parked`` and ``parked again`` (waiting on approvals until after ``end``: the notebook
    resumes one, its restore panel the other) and ``conversation``.
    """
    clock.set(end - timedelta(days=3))

    def pace(ctx: RunContext) -> None:
        clock.advance(timedelta(seconds=20))

    publisher = publish_runner(pace, lambda s: s["topic"] == "edge launch")
    threads = {"completed": publisher.start(store, {"topic": "edge release notes"}).thread_id}
    clock.set(end - timedelta(days=2))
    threads["failed"] = publisher.start(store, {"topic": "edge launch"}).thread_id
    clock.set(end - timedelta(days=1))
    threads["parked"] = publisher.start(
        store, {"topic": "edge pricing", "needs_approval": True}
    ).thread_id
    clock.set(end - timedelta(hours=22))
    threads["parked again"] = publisher.start(
        store, {"topic": "edge roadmap", "needs_approval": True}
    ).thread_id
    clock.set(end - timedelta(hours=20))
    threads["conversation"] = "edge-conversation"
    assistant_runner().start(
        store,
        {"messages": [{"role": "user", "content": "hi"}]},
        thread_id=threads["conversation"],
        owner="conversations",
    )
    return threads


def _lose_and_restore_edge(
    edge_url: str, edge_path: Path, plane: DemoPlane, end: datetime, limits: Any
) -> tuple[list[str], str]:
    """The edge worker's runs, replicated; its store lost; the failed run restored and resumed."""
    import durability
    from durability import replication, restore

    clock = FrozenClock(end)
    with durability.open(edge_url, clock=clock, single_worker=True) as edge:
        conn = replication.connect(
            edge, plane.url, plane.keys["edge"], background=False, limits=limits
        )
        threads = edge_runs(edge, clock, end)
        conn.close()
    _remove_sqlite(edge_path)  # the edge machine is lost, and its disk with it

    failed = threads["failed"]
    with durability.open(edge_url, clock=FrozenClock(end), single_worker=True) as edge:
        conn = replication.connect(
            edge, plane.url, plane.keys["edge"], background=False, limits=limits
        )
        plan = restore.plan_restore(edge, failed, conn)
        restore.apply_restore(edge, plan)
        publish.resume(edge, failed)  # the review service answers again
        conn.close()
        edge.record_connection("", plane.url)
    log.info("restored %s; %s stays on the plane only", failed, threads["parked"])
    return sorted(t for t in threads.values() if t != failed), failed


class Ticket(TypedDict, total=False):
    """The state of the demo's LangGraph graph."""

    ticket: str
    draft: str
    decision: str


def langgraph_store(path: Path) -> str | None:
    """A store LangGraph's own ``SqliteSaver`` wrote (a graph that asks before it replies: two
    threads wait on the ask, one was answered), as a ``langgraph+sqlite`` URL; ``None`` when
    LangGraph is not installed (``pip install 'durability-toolkit[langgraph]'``)."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Command, interrupt
    except ImportError:
        return None

    def draft(state: Ticket) -> Ticket:
        return {"draft": f"reply to {state['ticket']}"}

    def approve(state: Ticket) -> Ticket:
        return {"decision": interrupt({"question": "send this reply?", "draft": state["draft"]})}

    graph = StateGraph(Ticket)
    graph.add_node("draft", draft)
    graph.add_node("approve", approve)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "approve")
    graph.add_edge("approve", END)
    _remove_sqlite(path)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        app = graph.compile(checkpointer=saver)
        for n in range(3):
            app.invoke({"ticket": f"ticket {n}"}, {"configurable": {"thread_id": f"ticket-{n}"}})
        app.invoke(Command(resume="send"), {"configurable": {"thread_id": "ticket-0"}})
    return f"langgraph+sqlite:///{path.resolve()}"


def notebook_parameters(
    manifest: dict[str, Any], plane_url: str | None, charts: Path
) -> dict[str, dict[str, Any]]:
    """The ``parameters`` of each bundled notebook for the demo described by ``manifest``."""
    common = {"output_dir": str(charts)}
    return {
        "explore_store.ipynb": {
            **common,
            "store_url": manifest["store_url"],
            "plane_url": plane_url,
            "api_key_env": KEY_ENV["main"],
            "foreign_url": manifest.get("foreign_url"),
        },
        "plan_retention.ipynb": {**common, "store_url": manifest["store_url"]},
        "restore_runs.ipynb": {
            **common,
            "store_url": manifest["edge_url"],
            "plane_url": plane_url,
            "api_key_env": KEY_ENV["edge"],
            "runner": "durability.demo:publish",
            "copies_dir": str(charts.parent / RESTORE_COPIES),
        },
    }


def run_notebooks(fleet: Fleet, *, names: tuple[str, ...] | None = None) -> list[Any]:
    """Execute the bundled notebooks on the demo (its plane still served): executed copies in
    ``out/notebooks``, their charts (PNG) in ``out/charts``. Returns :class:`bundle.Executed`."""
    from durability import bundle

    charts = (fleet.out / "charts").resolve()
    charts.mkdir(parents=True, exist_ok=True)
    params = notebook_parameters(fleet.manifest(), fleet.plane.url, charts)
    return [
        bundle.execute(
            bundle.notebook(name),
            params[name],
            fleet.out / "notebooks",
            env=fleet.plane.env(),
            cwd=fleet.out,
        )
        for name in names or bundle.NOTEBOOK_NAMES
    ]
