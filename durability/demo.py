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
and brought back from the plane with :mod:`durability.restore`.

The runners are importable for ``durability resume``::

    durability resume sqlite:///durability-out/demo.db THREAD --single-worker \\
        --runner durability.demo:publish --value '{"approved": true}'
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from durability.clock import FrozenClock
from durability.runs import AgentNode, Flow, RunContext, RunControl, Runner
from durability.stores.base import Store

DEMO_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

#: Called at the start of every demo step: the demo moves its clock there.
Pace = Callable[[RunContext], None]

State = dict[str, Any]


def _no_pace(ctx: RunContext) -> None:
    """Real runs take their own time."""


def publish_runner(
    pace: Pace = _no_pace, review_down: Callable[[State], bool] | None = None
) -> Runner:
    """The publishing runner: fetch, plan, draft, review, approve (may park), publish.

    ``review_down(state)`` says whether the review service is down for that run (it fails).
    """

    def note(name: str) -> Callable[[State, RunContext], State]:
        def step(state: State, ctx: RunContext) -> State:
            pace(ctx)
            if name == "review" and review_down is not None and review_down(state):
                raise TimeoutError("the review service did not answer")
            return {**state, "notes": [*state.get("notes", []), f"{name} done"]}

        step.__name__ = name
        return step

    def approve(state: State, ctx: RunContext) -> State:
        pace(ctx)
        if not state.get("needs_approval"):
            return state
        answer = ctx.interrupt(
            "needs a human approval", {"draft": state["topic"]}, deadline=timedelta(days=5)
        )
        return {
            **state,
            "approved": bool(answer.get("approved")) if isinstance(answer, dict) else bool(answer),
        }

    return Runner(
        "publish",
        [note("fetch"), note("plan"), note("draft"), note("review"), approve, note("publish")],
    )


def assistant_runner(pace: Pace = _no_pace) -> Runner:
    """A conversation's agent: one reply per turn, on the conversation's thread."""

    def reply(state: State, ctx: RunContext) -> State:
        pace(ctx)
        messages = [
            *state.get("messages", []),
            {"role": "assistant", "content": f"answer {len(state.get('messages', []))}"},
        ]
        return {**state, "messages": messages}

    return Runner("assistant", [reply])


def support_flow(pace: Pace = _no_pace) -> Flow:
    """A support flow: its triage agent runs on a thread per flow run (the flow owns it)."""

    def classify(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "category": "billing" if "refund" in state["ticket"] else "general"}

    def intake(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "received": True}

    def resolve(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "resolved": state["category"]}

    triage = Runner("triage", [classify], retention={"finished": "1d"})
    return Flow(
        "support",
        [intake, AgentNode("triage", triage, "{flow_run_id}-triage"), resolve],
        retention={"waiting": "14d", "finished": "2d"},
    )


def ingest_runner(pace: Pace = _no_pace, document_bytes: int = 150_000) -> Runner:
    """The ingest runner: fetch a document, summarise it, done.

    The fetched document rides in the state, so every row after ``fetch`` is about
    ``document_bytes`` big: over the demo plane's state cap, the rows the plane refuses.
    """

    def fetch(state: State, ctx: RunContext) -> State:
        pace(ctx)
        line = f"{state['source']}: quarterly figures, appendix and scanned pages. "
        return {**state, "document": (line * (document_bytes // len(line) + 1))[:document_bytes]}

    def summarise(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "summary": state["document"][:120]}

    return Runner("ingest", [fetch, summarise])


publish = publish_runner()
assistant = assistant_runner()
support = support_flow()

#: What happens to the demo's publishing runs, in turn.
PUBLISH_KINDS = (
    "completed",
    "parked",
    "completed",
    "stopped",
    "failed, resumed",
    "completed",
    "parked, aborted",
    "failed",
    "completed",
    "parked",
    "completed",
    "failed",
)

#: The demo fleet's span, and how often its deployment drains the outbox to the plane.
DEMO_DAYS = 42
DRAIN_EVERY = timedelta(hours=6)
#: Turns of each demo conversation, as days after the fleet's start: idle gaps of days, and
#: the first conversations went quiet weeks ago (past the 30-day waiting horizon).
CONVERSATIONS = (
    (0, 1, 3, 4),
    (2, 9, 10),
    (5, 6, 14, 15, 16),
    (12, 25, 26),
    (20, 22, 34, 36),
    (30, 31, 40, 41.5),
)
#: Support flow sessions: (day, restarts).
SUPPORT_SESSIONS = ((3, 0), (8, 1), (15, 0), (27, 0), (33, 2), (39.5, 0))
#: Ingest runs (their documents exceed the demo plane's state cap), as days after the start.
INGESTS = (11, 33.5)

Event = tuple[datetime, int, Callable[[], object]]


def build_demo(
    store: Store,
    clock: FrozenClock,
    *,
    start: datetime = DEMO_START,
    days: float = DEMO_DAYS,
    on_tick: Callable[[datetime], None] | None = None,
    seed: int = 7,
) -> None:
    """Write the demo fleet into ``store``; ``clock`` is the store's clock and is moved forward.

    Events happen in time order from ``start`` over ``days`` (runs every 36 hours, conversation
    turns days apart, support sessions, ingest runs); ``on_tick(now)`` is called every
    :data:`DRAIN_EVERY` of the fleet's clock (what a deployment's drain does). Parked runs need a
    store that can hold them (``single_worker=True`` on SQLite); on one that cannot, those runs
    fail with the park's refusal, which is what a real deployment would see.
    """
    rng = random.Random(seed)
    stopping: list[RunControl] = []  # the control of a run an operator stops at its draft

    def pace(ctx: RunContext) -> None:
        clock.advance(timedelta(seconds=rng.randint(5, 90)))
        if stopping and ctx.step == "draft":
            stopping.pop().stop()

    outage: set[str] = set()  # topics whose review fails: the review service is down for them
    publisher = publish_runner(pace, lambda s: s["topic"] in outage)
    talker = assistant_runner(pace)
    flow = support_flow(pace)
    ingester = ingest_runner(pace)
    end = start + timedelta(days=days)
    events: list[Event] = []

    def at(when: datetime, action: Callable[[], object]) -> None:
        if when < end:
            events.append((when, len(events), action))

    def publish_run(n: int) -> Callable[[], None]:
        kind = PUBLISH_KINDS[n % len(PUBLISH_KINDS)]
        topic = f"topic {n}"

        def run() -> None:
            control = RunControl()
            if kind == "stopped":
                stopping.append(control)
            if kind.startswith("failed"):
                outage.add(topic)
            result = publisher.start(
                store,
                {"topic": topic, "needs_approval": kind.startswith("parked")},
                control=control,
            )
            if kind == "failed, resumed":  # the review service is back: resume the failed run
                at(clock() + timedelta(hours=2), lambda: resume_fixed(result.thread_id, topic))
            elif kind == "parked, aborted" and result.park is not None:
                # nobody answered: an operator aborts the run
                at(
                    clock() + timedelta(days=1),
                    lambda: publisher.stop(store, result.thread_id, abort=True),
                )

        return run

    def resume_fixed(thread_id: str, topic: str) -> None:
        outage.discard(topic)
        publisher.resume(store, thread_id)

    conversations: dict[str, list[dict[str, str]]] = {}

    def turn(thread_id: str) -> Callable[[], None]:
        def run() -> None:
            messages = conversations.setdefault(thread_id, [])
            asked = [*messages, {"role": "user", "content": f"question {len(messages) // 2}"}]
            result = talker.start(
                store, {"messages": asked}, thread_id=thread_id, owner="conversations"
            )
            conversations[thread_id] = result.state["messages"]

        return run

    def session(n: int) -> Callable[[], object]:
        ticket = "refund please" if n % 2 else "password reset"
        return lambda: flow.start(store, {"ticket": ticket}, thread_id=f"support-session-{n}")

    def ingest(n: int) -> Callable[[], object]:
        return lambda: ingester.start(store, {"source": f"report-{n}.pdf"})

    for n in range(int(days * 24 // 36)):
        at(start + timedelta(hours=36 * n), publish_run(n))
    for n, turns in enumerate(CONVERSATIONS):
        for day in turns:
            at(start + timedelta(days=day, hours=n), turn(f"conversation-{n}"))
    for n, (day, restarts) in enumerate(SUPPORT_SESSIONS):
        for attempt in range(restarts + 1):  # a restarted session runs again hours later
            at(start + timedelta(days=day, hours=1 + attempt * 3), session(n))
    for n, day in enumerate(INGESTS):
        at(start + timedelta(days=day, hours=2), ingest(n))
    if on_tick is not None:
        tick = start + DRAIN_EVERY
        while tick < end:
            at(tick, (lambda when: lambda: on_tick(when))(tick))
            tick += DRAIN_EVERY
    while events:
        events.sort(key=lambda e: (e[0], e[1]))
        when, _, action = events.pop(0)
        clock.set(max(when, clock()))
        action()


# ---------------------------------------------------------------------------- the whole demo

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
def build_fleet(out: Path, *, end: datetime | None = None) -> Iterator[Fleet]:
    """Build the whole demo in ``out`` and keep its plane served while the context is open.

    1. The deployment's store (``out/demo.db``, SQLite, ``single_worker=True``): the fleet of
       :func:`build_demo` over :data:`DEMO_DAYS` days ending at ``end`` (default: now, to the
       hour), drained to the plane every :data:`DRAIN_EVERY` of its clock, except during the
       :data:`MAINTENANCE` window (503) and after the last drain, :data:`LAST_DRAIN_BEFORE_END`
       before the end. The ingest runs' rows exceed the plane's state cap: the plane refuses
       them and they are quarantined with its reason.
    2. An edge worker's store (``out/edge.db``): a few runs in the last days, all replicated;
       then the file is deleted (the machine is lost), a fresh store is opened at the same path,
       the failed run is restored from the plane (plan, then apply) and resumed to completion.
       Its other threads stay on the plane only, for ``restore_runs.ipynb`` to bring back.
    """
    import durability
    from durability import replication

    out.mkdir(parents=True, exist_ok=True)
    for name in (*PROJECTS.values(), "plane.db", "langgraph.db"):
        _remove_sqlite(out / name)
    end = end or datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=DEMO_DAYS)
    store_url = f"sqlite:///{(out / PROJECTS['main']).resolve()}"
    edge_path = (out / PROJECTS["edge"]).resolve()
    edge_url = f"sqlite:///{edge_path}"
    limits = replication.PlaneLimits()  # the documented 1 MiB: the workers' configuration
    drains = {"passes": 0, "refused": 0}

    with _quiet_runs(), serve_demo_plane(out) as plane:
        clock = FrozenClock(start)
        with durability.open(store_url, clock=clock, single_worker=True) as store:
            conn = replication.connect(
                store, plane.url, plane.keys["main"], background=False, limits=limits
            )
            cutoff = end - LAST_DRAIN_BEFORE_END
            down = (start + timedelta(days=MAINTENANCE[0]), start + timedelta(days=MAINTENANCE[1]))

            def drain(now: datetime) -> None:
                if not conn.active:
                    return
                plane.maintenance.down = down[0] <= now < down[1]
                report = replication.drain_once(conn)
                drains["passes"] += 1
                drains["refused"] += bool(report.buffered)
                if now + DRAIN_EVERY > cutoff:
                    conn.close()  # the worker is redeployed: this was its last drain

            build_demo(store, clock, start=start, on_tick=drain)
            plane.maintenance.down = False
            if conn.active:
                conn.close()
            clock.set(end)
            # The deployment's worker keeps the store connected; the record says it replicates.
            store.record_connection("", plane.url)

        lost, restored = _lose_and_restore_edge(edge_url, edge_path, plane, end, limits)
        foreign = langgraph_store(out / "langgraph.db")
        fleet = Fleet(out, store_url, edge_url, plane, start, end, lost, restored, drains, foreign)
        (out / MANIFEST).write_text(json.dumps(fleet.manifest(), indent=2) + "\n")
        yield fleet


def edge_runs(store: Store, clock: FrozenClock, end: datetime) -> dict[str, str]:
    """The edge worker's runs in its last three days before ``end``, written into ``store``.

    Returns their threads by kind: ``completed``, ``failed`` (its review timed out),
    ``parked`` (waiting on an approval until after ``end``) and ``conversation``.
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


# ---------------------------------------------------------------------------- the notebooks


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
