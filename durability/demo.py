"""A demo store of real checkpoints: runs that completed, failed and parked, and a conversation.

Built directly on the store contract, spread over days by an injected clock, so every view of
the bundle has something true to show.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from durability.clock import FrozenClock
from durability.model import COMPLETED, FAILED, STEP_NODE, STEP_RUN_END, Checkpoint
from durability.settings import declare_retention
from durability.stores.base import Store

DEMO_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def build_demo(store: Store, clock: FrozenClock, *, runs: int = 12, seed: int = 7) -> None:
    """Write a small fleet into ``store``; ``clock`` is the store's clock and is moved forward."""
    rng = random.Random(seed)
    steps = ["fetch", "plan", "draft", "review", "publish"]
    for n in range(runs):
        clock.set(DEMO_START + timedelta(hours=9 * n))
        thread_id = f"run-{n:03d}"
        run_id = f"{thread_id}/1"
        declared = declare_retention(store.settings, finished="2d") if n % 4 == 0 else None
        store.record_run_start(thread_id, run_id=run_id, owner="demo-runner", retention=declared)
        state: dict[str, object] = {"input": {"topic": f"topic {n}"}, "notes": []}
        fails_at = 3 if n % 5 == 4 else None
        for i, step in enumerate(steps):
            clock.advance(timedelta(seconds=rng.randint(5, 90)))
            if fails_at == i:
                break
            state = {**state, "notes": [*state["notes"], f"{step} done"]}  # type: ignore[list-item]
            store.put(
                Checkpoint(
                    thread_id=thread_id,
                    run_id=run_id,
                    runner="demo-chain",
                    node_id=step,
                    step=i,
                    step_type=STEP_NODE,
                    state=state,
                    node_output={"output": f"{step} of topic {n}"},
                )
            )
        if n % 6 == 5 and store.capabilities.can_park:
            store.park(
                Checkpoint(thread_id=thread_id, run_id=run_id, runner="demo-chain", node_id="approve", step=len(steps), state=state),
                deadline=clock() + timedelta(days=3),
                reason="needs a human approval",
                context={"draft": f"topic {n}"},
            )
            continue
        status = FAILED if fails_at is not None else COMPLETED
        end_state = {**state, "run_status": status}
        if fails_at is not None:
            end_state["run_error"] = "TimeoutError: the review service did not answer"
        store.put(
            Checkpoint(
                thread_id=thread_id, run_id=run_id, runner="demo-chain", node_id="run_end",
                step=len(steps), step_type=STEP_RUN_END, status=status, state=end_state,
            )
        )
        store.mark_finished(thread_id)
    for n in range(3):
        thread_id = f"conversation-{n}"
        for turn in range(4):
            clock.set(DEMO_START + timedelta(days=turn * (n + 1), hours=n))
            store.record_run_start(thread_id, run_id=f"{thread_id}/turn-{turn}", owner="conversations")
            store.put(
                Checkpoint(
                    thread_id=thread_id,
                    run_id=f"{thread_id}/turn-{turn}",
                    runner="assistant",
                    agent_path="agent:assistant",
                    node_id=f"turn:{turn}",
                    step=turn,
                    step_type="llm_call",
                    state={"messages": [{"role": "user", "content": f"question {t}"} for t in range(turn + 1)]},
                )
            )
