"""Background traffic for the demo: thousands of assistant conversations with the shapes real
fleets have, written straight into the store in time order (:class:`Traffic`).

* **Arrivals**: new conversations per day follow a weekly season (weekdays busier than the
  weekend) with a few burst days (three to five times the usual).
* **Sizes**: each conversation's state grows turn by turn; its per-turn growth is heavy-tailed
  (log-normal), and a handful of conversations carry attachments of several MiB, which the
  demo plane refuses (quarantined: poison rows).
* **Idle gaps**: the time between two turns is log-normal, from minutes to weeks (median about
  a day), so some conversations outlive a short waiting retention and some do not.
* **Ends**: about a third are marked finished by their owner after their last turn.

Each turn is one completed run (its reply and its run end). Rows are written with their own
``created_at`` through ``put_many``, and the conversations' run starts and finished marks through
the ledger's bulk writes (``record_run_starts``, ``mark_finished_many``), a batch of each per
call, so a fleet of thousands builds in seconds; :meth:`Traffic.write_until` is called from the demo's
drain tick, so the rows reach the plane through the real outbox like every other row.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from durability.model import STEP_NODE, STEP_RUN_END, Checkpoint
from durability.runs.vocabulary import RUN_END_NODE
from durability.stores.base import Store
from durability.stores.ledger import RunStart

#: The owner and runner of the background conversations.
OWNER = "assistants"
RUNNER = "chat"
#: Multi-MiB attachments: how many conversations carry one, and its size.
ATTACHMENTS = 4
ATTACHMENT_BYTES = 3 * 1024 * 1024
#: Relative arrival rate per weekday, Monday first.
WEEKLY = (1.2, 1.25, 1.2, 1.15, 1.0, 0.45, 0.35)


@dataclass(order=True)
class _Turn:
    at: datetime
    thread: int
    index: int = field(compare=False)
    last: bool = field(compare=False)
    grow: int = field(compare=False)
    attachment: bool = field(compare=False, default=False)


class Traffic:
    """``threads`` conversations spread over ``days`` days from ``start`` (seeded)."""

    def __init__(self, start: datetime, days: float, threads: int, *, seed: int = 11) -> None:
        rng = random.Random(seed)
        self.turns: list[_Turn] = []
        self._written = 0
        self._sizes: dict[int, int] = {}
        self.finished: set[int] = set()
        weights = [_day_weight(rng, start + timedelta(days=d)) for d in range(math.ceil(days))]
        heavy = set(rng.sample(range(threads), min(ATTACHMENTS, threads)))
        for n in range(threads):
            day = rng.choices(range(len(weights)), weights)[0]
            at = start + timedelta(days=day, seconds=rng.uniform(6 * 3600, 22 * 3600))
            grow = max(200, int(rng.lognormvariate(6.2, 1.2)))  # median ~1.8 KiB a turn
            count = 1 + min(24, int(rng.expovariate(1 / 4)))
            ended = rng.random() < 0.35  # its owner marks it finished after its last turn
            for i in range(count):
                if at >= start + timedelta(days=days):
                    break
                last = i == count - 1
                self.turns.append(_Turn(at, n, i, last, grow, n in heavy and i == 0))
                if last and ended:
                    self.finished.add(n)
                gap = rng.lognormvariate(math.log(20 * 3600), 1.8)  # median ~20 h, tail weeks
                at += timedelta(seconds=min(gap, 40 * 86_400))
        self.turns.sort()

    @property
    def written(self) -> int:
        """Turns written so far."""
        return self._written

    def write_until(self, store: Store, now: datetime) -> int:
        """Write every turn up to ``now`` not written yet; returns how many rows (two a turn)."""
        batch: list[Checkpoint] = []
        starts: list[str] = []
        ends: list[str] = []
        while self._written < len(self.turns) and self.turns[self._written].at <= now:
            turn = self.turns[self._written]
            self._written += 1
            thread_id = f"chat-{turn.thread:05d}"
            size = self._sizes.get(turn.thread, 0) + turn.grow
            self._sizes[turn.thread] = size
            state = {"messages": "m" * size}
            if turn.attachment:
                state["attachment"] = "a" * ATTACHMENT_BYTES
            if turn.index == 0:
                starts.append(thread_id)
            run_id = f"{thread_id}-{turn.index}"
            for node, step_type, step in (("reply", STEP_NODE, 0), (RUN_END_NODE, STEP_RUN_END, 1)):
                # Each turn is one completed run: its reply, then its run end.
                batch.append(
                    Checkpoint(
                        thread_id=thread_id,
                        node_id=node,
                        runner=RUNNER,
                        run_id=run_id,
                        step=step,
                        step_type=step_type,
                        state=state,
                        created_at=turn.at + timedelta(seconds=step),
                    )
                )
            if turn.last and turn.thread in self.finished:
                ends.append(thread_id)
        ledger = store.ledger
        if ledger is not None:
            ledger.record_run_starts([RunStart(t, f"{t}-0", OWNER) for t in starts])
        if batch:
            store.put_many(batch)
        if ledger is not None:
            ledger.mark_finished_many(ends)
        return len(batch)


def _day_weight(rng: random.Random, day: datetime) -> float:
    """A day's arrival weight: the weekly season, and now and then a burst."""
    burst = rng.uniform(3, 5) if rng.random() < 0.04 else 1.0
    return WEEKLY[day.weekday()] * burst


__all__ = ["ATTACHMENTS", "ATTACHMENT_BYTES", "OWNER", "RUNNER", "Traffic"]
