"""Six weeks of the fleet's history on an injected clock (:func:`build_demo`): runs that
complete, fail, park and resume, conversations, support sessions, ingests, drains.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from durability.clock import FrozenClock
from durability.demo.runners import assistant_runner, ingest_runner, publish_runner, support_flow
from durability.runs import RunContext, RunControl
from durability.stores.base import Store

Event = tuple[datetime, int, Callable[[], object]]

DEMO_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


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
    history = _History(store, clock, start + timedelta(days=days), random.Random(seed))
    history.schedule(start, days, on_tick)
    history.play()


class _History:
    """The demo's schedule of events and the runners they drive, on the store's clock."""

    def __init__(self, store: Store, clock: FrozenClock, end: datetime, rng: random.Random) -> None:
        self.store, self.clock, self.end, self.rng = store, clock, end, rng
        self.events: list[Event] = []
        self.stopping: list[RunControl] = []  # the control of a run an operator stops at its draft
        self.outage: set[str] = set()  # topics whose review fails: the review service is down
        self.conversations: dict[str, list[dict[str, str]]] = {}
        self.publisher = publish_runner(self.pace, lambda s: s["topic"] in self.outage)
        self.talker = assistant_runner(self.pace)
        self.flow = support_flow(self.pace)
        self.ingester = ingest_runner(self.pace)

    def pace(self, ctx: RunContext) -> None:
        """A step takes seconds of the fleet's clock; a run an operator stops stops at its draft."""
        self.clock.advance(timedelta(seconds=self.rng.randint(5, 90)))
        if self.stopping and ctx.step == "draft":
            self.stopping.pop().stop()

    def at(self, when: datetime, action: Callable[[], object]) -> None:
        """Schedule ``action`` at ``when`` (dropped when past the fleet's end)."""
        if when < self.end:
            self.events.append((when, len(self.events), action))

    def schedule(
        self, start: datetime, days: float, on_tick: Callable[[datetime], None] | None
    ) -> None:
        """Every run, turn, session, ingest and tick of the fleet, at its time."""
        for n in range(int(days * 24 // 36)):
            self.at(start + timedelta(hours=36 * n), self.publish_run(n))
        for n, turns in enumerate(CONVERSATIONS):
            for day in turns:
                self.at(start + timedelta(days=day, hours=n), self.turn(f"conversation-{n}"))
        for n, (day, restarts) in enumerate(SUPPORT_SESSIONS):
            for attempt in range(restarts + 1):  # a restarted session runs again hours later
                self.at(start + timedelta(days=day, hours=1 + attempt * 3), self.session(n))
        for n, day in enumerate(INGESTS):
            self.at(start + timedelta(days=day, hours=2), self.ingest(n))
        if on_tick is not None:
            tick = start + DRAIN_EVERY
            while tick < self.end:
                self.at(tick, (lambda when: lambda: on_tick(when))(tick))
                tick += DRAIN_EVERY

    def play(self) -> None:
        """Run the events in time order (an event may schedule later ones)."""
        while self.events:
            self.events.sort(key=lambda e: (e[0], e[1]))
            when, _, action = self.events.pop(0)
            self.clock.set(max(when, self.clock()))
            action()

    def publish_run(self, n: int) -> Callable[[], None]:
        """The ``n``-th publishing run, doing what :data:`PUBLISH_KINDS` says."""
        kind = PUBLISH_KINDS[n % len(PUBLISH_KINDS)]
        topic = f"topic {n}"

        def run() -> None:
            control = RunControl()
            if kind == "stopped":
                self.stopping.append(control)
            if kind.startswith("failed"):
                self.outage.add(topic)
            result = self.publisher.start(
                self.store,
                {"topic": topic, "needs_approval": kind.startswith("parked")},
                control=control,
            )
            later = self.clock()
            if kind == "failed, resumed":  # the review service is back: resume the failed run
                self.at(
                    later + timedelta(hours=2), lambda: self.resume_fixed(result.thread_id, topic)
                )
            elif kind == "parked, aborted" and result.park is not None:
                # nobody answered: an operator aborts the run
                self.at(
                    later + timedelta(days=1),
                    lambda: self.publisher.stop(self.store, result.thread_id, abort=True),
                )

        return run

    def resume_fixed(self, thread_id: str, topic: str) -> None:
        """The review service answers that topic again: resume its failed run."""
        self.outage.discard(topic)
        self.publisher.resume(self.store, thread_id)

    def turn(self, thread_id: str) -> Callable[[], None]:
        """A turn of the conversation: the user asks, the assistant's run replies."""

        def run() -> None:
            messages = self.conversations.setdefault(thread_id, [])
            asked = [*messages, {"role": "user", "content": f"question {len(messages) // 2}"}]
            result = self.talker.start(
                self.store, {"messages": asked}, thread_id=thread_id, owner="conversations"
            )
            self.conversations[thread_id] = result.state["messages"]

        return run

    def session(self, n: int) -> Callable[[], object]:
        """The ``n``-th support session (a run of the flow on its session thread)."""
        ticket = "refund please" if n % 2 else "password reset"
        return lambda: self.flow.start(
            self.store, {"ticket": ticket}, thread_id=f"support-session-{n}"
        )

    def ingest(self, n: int) -> Callable[[], object]:
        """The ``n``-th ingest run (its document exceeds the demo plane's state cap)."""
        return lambda: self.ingester.start(self.store, {"source": f"report-{n}.pdf"})
