"""The durable runner: checkpoints, leases, parks, resume, stop and abort, fork, ownership marks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import runner_defs

import durability
from durability import Checkpoint
from durability.clock import FrozenClock
from durability.errors import (
    AlreadyResumed,
    CodecError,
    ConfigError,
    LeaseHeld,
    LeaseLost,
    RetentionError,
    RunError,
    RunNotResumable,
)
from durability.model import STEP_NODE, STEP_RUN_END
from durability.runs import (
    NO_VALUE,
    AgentNode,
    Flow,
    RunContext,
    RunControl,
    Runner,
    list_runs,
    load_runner,
    read_thread,
)
from durability.settings import Settings
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.testing import StoreTarget

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture
def store(target: StoreTarget, clock: FrozenClock) -> Iterator[Store]:
    with target.open(clock=clock) as opened:
        yield opened


def memory(clock: FrozenClock | None = None) -> Store:
    """Another store: a per-run provider or the deployment's, each test its own."""
    return durability.open(f"memory://runs-{uuid.uuid4().hex}", settings=Settings(), clock=clock)


def add(key: str, value: Any = True) -> Callable[[Any, RunContext], Any]:
    def step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        return {**state, key: value}

    step.__name__ = key
    return step


def fails_once(key: str, error: Exception) -> tuple[Callable[[Any, RunContext], Any], list[int]]:
    """A step that raises ``error`` on its first call and then sets ``key``, and the list of
    its calls (one entry each)."""
    calls: list[int] = []

    def step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return {**state, key: True}

    return step, calls


def shape(store: Store, thread_id: str) -> list[tuple[str, str | None, str]]:
    return [(c.node_id, c.step_type, c.status) for c in read_thread(store, thread_id)]


def needs_parks(store: Store) -> None:
    if not store.capabilities.can_park:
        pytest.skip(
            f"the {store.provider} store cannot hold a parked run (tested by test_park_refused_where_parks_cannot_live)"
        )


# ---------------------------------------------------------------------------- checkpoints and run ends


def test_completed_run_checkpoints_every_step_and_ends_once(store: Store) -> None:
    """A run writes its input, one node row per step (state, step index, changes) and one completed run end."""
    runner = Runner("three", [add("a", 1), add("b", 2), add("c", 3)])
    result = runner.start(store, {"input": 0})
    assert (result.status, result.state, result.last_step) == (
        "completed",
        {"input": 0, "a": 1, "b": 2, "c": 3},
        "c",
    )
    rows = read_thread(store, result.thread_id)
    assert [(c.node_id, c.step_type, c.step, c.status) for c in rows] == [
        ("__start__", "run_start", -1, "completed"),
        ("a", "node", 0, "completed"),
        ("b", "node", 1, "completed"),
        ("c", "node", 2, "completed"),
        ("run_end", "run_end", 3, "completed"),
    ]
    assert {c.run_id for c in rows} == {result.run_id}
    assert {c.runner for c in rows} == {"three"}
    assert rows[0].state == {"input": 0}
    assert rows[2].state == {"input": 0, "a": 1, "b": 2}
    assert rows[2].node_output == {"b": 2}
    assert rows[2].node_input == {}
    end = rows[-1]
    assert end.state == {"input": 0, "a": 1, "b": 2, "c": 3, "run_status": "completed"}
    assert end.node_output == {"run_status": "completed"}
    assert end.checkpoint_id == result.checkpoint_id
    record = store.thread(result.thread_id)
    assert record is not None
    assert record.lease is None, "the lease is released at the end"


def test_failed_run_end_carries_reason_and_error(store: Store) -> None:
    """A step that raises ends the run failed: reason error, the error text, the state before the step."""

    def explode(state: Any, ctx: RunContext) -> Any:
        raise ValueError("the review service said no")

    result = Runner("fails", [add("a"), explode, add("never")]).start(store, {"x": 1})
    assert (result.status, result.reason, result.last_step) == ("failed", "error", "a")
    assert result.error == "ValueError: the review service said no"
    assert isinstance(result.exception, ValueError)
    assert not result.ok
    end = read_thread(store, result.thread_id)[-1]
    assert (end.step_type, end.status, end.step) == ("run_end", "failed", 1)
    assert end.state == {
        "x": 1,
        "a": True,
        "run_status": "failed",
        "run_reason": "error",
        "run_error": "ValueError: the review service said no",
    }
    assert end.node_output == {
        "run_status": "failed",
        "run_reason": "error",
        "run_error": "ValueError: the review service said no",
    }
    assert [c.node_id for c in read_thread(store, result.thread_id)] == [
        "__start__",
        "a",
        "run_end",
    ]


def test_run_end_of_a_non_dict_state_leaves_the_state_alone(store: Store) -> None:
    """A state that is not a dict is kept as it is; the run end's record is in node_output."""
    result = Runner("listy", [("grow", lambda s, ctx: [*s, len(s)])]).start(store, [0])
    end = read_thread(store, result.thread_id)[-1]
    assert end.state == [0, 1]
    assert end.node_output == {"run_status": "completed"}
    assert read_thread(store, result.thread_id)[1].node_output == {"output": [0, 1]}


def test_completed_run_is_refused_and_store_left_alone(store: Store) -> None:
    """Resuming a completed run raises RunNotResumable naming the run and what to do; nothing is written."""
    runner = Runner("done", [add("a")])
    result = runner.start(store, {})
    before = read_thread(store, result.thread_id)
    with pytest.raises(RunNotResumable, match="already completed") as info:
        runner.resume(store, result.thread_id)
    assert result.run_id in str(info.value)
    assert "start a new run" in str(info.value)
    assert "fork" in str(info.value)
    assert read_thread(store, result.thread_id) == before
    with pytest.raises(RunNotResumable, match="holds no checkpoint"):
        runner.resume(store, "no-such-thread")


def test_failed_run_resumes_after_its_last_real_step_in_seq_order(store: Store) -> None:
    """A failed run resumes after its own last step: seq order over the whole thread, not node index or 500 rows."""
    flaky, attempts = fails_once("s2", ConnectionError("upstream down"))
    runner = Runner("flaky", [add("s0"), add("s1"), ("s2", flaky), add("s3")])
    # An earlier run on the thread left 600 rows at the highest step index: a node-index order,
    # or a 500-row window, would pick one of them as "the last real step".
    earlier = [
        Checkpoint(
            thread_id="busy",
            run_id="earlier",
            runner="flaky",
            node_id="s3",
            step=3,
            step_type=STEP_NODE,
            state={"earlier": n},
        )
        for n in range(600)
    ]
    store.put_many(
        [
            *earlier,
            Checkpoint(
                thread_id="busy",
                run_id="earlier",
                runner="flaky",
                node_id="run_end",
                step=4,
                step_type=STEP_RUN_END,
            ),
        ]
    )
    failed = runner.start(store, {"mine": True}, thread_id="busy")
    assert (failed.status, failed.reason, failed.last_step) == ("failed", "error", "s1")
    resumed = runner.resume(store, "busy")
    assert resumed.status == "completed"
    assert resumed.run_id == failed.run_id
    assert resumed.state == {"mine": True, "s0": True, "s1": True, "s2": True, "s3": True}
    assert len(attempts) == 2
    mine = [c for c in read_thread(store, "busy") if c.run_id == failed.run_id]
    assert [(c.node_id, c.status) for c in mine] == [
        ("__start__", "completed"),
        ("s0", "completed"),
        ("s1", "completed"),
        ("run_end", "failed"),
        ("s2", "completed"),
        ("s3", "completed"),
        ("run_end", "completed"),
    ]
    with pytest.raises(RunNotResumable, match="already completed"):
        runner.resume(store, "busy")


def test_run_failing_in_its_first_step_resumes_from_its_input(store: Store) -> None:
    """The run-start row holds the input, so a run that failed before any step resumes from step one."""
    first, _ = fails_once("first", RuntimeError("cold start"))
    runner = Runner("cold", [("first", first)])
    failed = runner.start(store, {"input": 7})
    assert failed.last_step is None
    assert runner.resume(store, failed.thread_id).state == {"input": 7, "first": True}


def test_resume_refuses_another_runner_and_unknown_steps(store: Store) -> None:
    """A thread is resumed only by the runner that wrote it, and only at steps it defines."""
    result = Runner("writer", [add("a"), add("b")]).start(store, {})
    store.put(
        Checkpoint(thread_id="other", runner="writer", node_id="a", step=0, step_type=STEP_NODE)
    )
    with pytest.raises(RunNotResumable, match="written by runner 'writer', not 'reader'"):
        Runner("reader", [add("a")]).resume(store, result.thread_id)
    with pytest.raises(RunNotResumable, match="does not define"):
        Runner("writer", [add("z")]).resume(store, "other")


# ---------------------------------------------------------------------------- parks


def test_park_and_resume_with_a_value(target: StoreTarget, store: Store) -> None:
    """A step's interrupt parks the run (checkpoint + park); resuming with a value answers it, on any handle."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "retention"})
    assert parked.status == "parked"
    assert parked.park is not None
    assert (parked.park.reason, parked.park.context, parked.park.node_id) == (
        "needs approval",
        {"draft": "about retention"},
        "approve",
    )
    assert parked.park.deadline == START + timedelta(days=2)
    assert shape(store, parked.thread_id)[-1] == ("approve", "hitl_pause", "interrupted")
    assert store.get_park(parked.thread_id) == parked.park
    record = store.thread(parked.thread_id)
    assert record is not None
    assert record.lease is None
    assert not record.finished, "a park is never a terminal"
    with target.open() as other_worker:
        with pytest.raises(RunNotResumable, match="waiting on an ask"):
            runner_defs.approval.resume(other_worker, parked.thread_id)
        assert other_worker.get_park(parked.thread_id) is not None, (
            "a refused resume leaves the park"
        )
        done = runner_defs.approval.resume(other_worker, parked.thread_id, {"approved": True})
    assert done.status == "completed"
    assert done.run_id == parked.run_id
    assert done.state["approved"] is True
    assert done.state["published"] is True
    assert store.get_park(parked.thread_id) is None
    approve_row = [
        c
        for c in read_thread(store, parked.thread_id)
        if c.node_id == "approve" and c.step_type == "node"
    ]
    assert approve_row[0].node_input == {"resume": {"approved": True}}


def test_value_for_a_run_that_is_not_parked_is_refused(store: Store) -> None:
    """Resuming a killed (not parked) run with a value is refused, naming its last step."""
    store.put(
        Checkpoint(
            thread_id="crashed",
            runner="approval",
            run_id="r",
            node_id="draft",
            step=0,
            step_type=STEP_NODE,
            state={"draft": "x"},
        )
    )
    with pytest.raises(RunError, match="not waiting on an ask"):
        runner_defs.approval.resume(store, "crashed", {"approved": True})


def test_park_refused_where_parks_cannot_live(target: StoreTarget, clock: FrozenClock) -> None:
    """On a store that cannot hold a park the ask is refused, the run fails with the refusal, nothing is parked."""
    with target.open(clock=clock) as store:
        if store.capabilities.can_park:
            pytest.skip("this store holds parks (tested by test_park_and_resume_with_a_value)")
        result = runner_defs.approval.start(store, {"topic": "t"})
        assert (result.status, result.reason) == ("failed", "error")
        assert result.error is not None
        assert result.error.startswith("ParkRefused")
        assert "cannot hold a parked run" in result.error
        assert pending_parks(store) == []
        assert [n for n, _, _ in shape(store, result.thread_id)] == [
            "__start__",
            "draft",
            "run_end",
        ]


@pytest.mark.parametrize(
    ("deadline", "message"),
    [
        (None, "no deadline"),
        (timedelta(days=31), "past the thread's waiting retention"),
        (timedelta(days=5), "waiting retention of 3d"),
    ],
)
def test_asks_without_a_fitting_deadline_are_refused(
    store: Store, deadline: timedelta | None, message: str
) -> None:
    """An ask with no deadline, or one past the thread's (declared) waiting horizon, fails the run before anything parks."""
    needs_parks(store)

    def ask(state: Any, ctx: RunContext) -> Any:
        return ctx.interrupt("sign off", deadline=deadline)

    retention = {"waiting": "3d"} if message.endswith("3d") else None
    result = Runner("asks", [ask], retention=retention).start(store, {})
    assert result.status == "failed"
    assert result.error is not None
    assert message in result.error
    assert pending_parks(store) == []
    assert shape(store, result.thread_id)[-1][0] == "run_end"


def test_one_of_many_concurrent_resumers_wins(target: StoreTarget, store: Store) -> None:
    """Eight workers on their own handles resume one park at once: one runs it, seven get AlreadyResumed."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "race"})
    handles = [target.open() for _ in range(8)]
    results, losers, ran = runner_defs.race_resumes(handles, parked.thread_id)
    assert [r.status for r in results] == ["completed"]
    assert ran == 1
    assert len(losers) == 7
    assert all(isinstance(e, AlreadyResumed) for e in losers), losers
    assert "one worker runs a thread at a time" in str(losers[0])


def test_concurrent_resumers_in_separate_processes(target: StoreTarget, store: Store) -> None:
    """Three processes resume one park at once: exactly one completes it, the others are refused."""
    needs_parks(store)
    if not target.cross_process:
        pytest.skip("this store lives in one process")
    parked = runner_defs.approval.start(store, {"topic": "processes"})
    args = [
        target.url,
        json.dumps(target.options),
        parked.thread_id,
        json.dumps({"approved": True}),
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, str(TESTS / "runner_defs.py"), "resume", *args],
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for _ in range(3)
    ]
    outcomes = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert sorted(o.get("status", "refused") for o in outcomes) == [
        "completed",
        "refused",
        "refused",
    ], outcomes
    approvals = [
        c
        for c in read_thread(store, parked.thread_id)
        if c.node_id == "approve" and c.step_type == "node"
    ]
    assert len(approvals) == 1, "the parked step ran exactly once"


# ---------------------------------------------------------------------------- killed runs


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}


def test_run_killed_mid_step_resumes_in_a_new_process(target: StoreTarget) -> None:
    """SIGKILL a run inside its second step; another process resumes it from the first step's checkpoint."""
    if not target.cross_process:
        pytest.skip("a memory store dies with its process")
    env = {**_env(), runner_defs.HANG: "1"}
    child = subprocess.Popen(
        [
            sys.executable,
            str(TESTS / "runner_defs.py"),
            "start",
            target.url,
            json.dumps(target.options),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("in-two "), line
    thread_id = line.split()[1]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    with target.open() as store:
        assert shape(store, thread_id) == [
            ("__start__", "run_start", "completed"),
            ("one", "node", "completed"),
        ]
        with pytest.raises(AlreadyResumed, match="killed and its lease has not expired"):
            runner_defs.crashy.resume(store, thread_id)
        assert {r.status for r in list_runs(store) if r.thread_id == thread_id} == {"running"}, (
            "its lease is still live"
        )
    later = FrozenClock(
        datetime.now(UTC) + timedelta(minutes=5)
    )  # the dead worker's lease has expired
    with target.open(clock=later) as store:
        assert [r.status for r in list_runs(store) if r.thread_id == thread_id] == ["stalled"]
        result = runner_defs.crashy.resume(store, thread_id)
        assert result.status == "completed"
        assert result.state["pids"] == {"one": child.pid, "two": os.getpid(), "three": os.getpid()}
        assert [n for n, _, _ in shape(store, thread_id)] == [
            "__start__",
            "one",
            "two",
            "three",
            "run_end",
        ]


# ---------------------------------------------------------------------------- stop, abort, timeout


def test_stop_lets_the_step_finish_then_ends_cancelled(store: Store) -> None:
    """A stop requested mid-step keeps that step's checkpoint, runs no further step, ends failed/cancelled."""
    control = RunControl()

    def operator_stops(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        control.stop()
        assert ctx.cancelled
        return {**state, "b": True}

    result = Runner("stoppable", [add("a"), ("b", operator_stops), add("c")]).start(
        store, {}, control=control
    )
    assert (result.status, result.reason, result.last_step, result.state) == (
        "failed",
        "cancelled",
        "b",
        {"a": True, "b": True},
    )
    assert [n for n, _, _ in shape(store, result.thread_id)] == ["__start__", "a", "b", "run_end"]
    end = read_thread(store, result.thread_id)[-1]
    assert end.node_output == {"run_status": "failed", "run_reason": "cancelled"}


def test_check_inside_a_step_stops_it_at_once(store: Store) -> None:
    """ctx.check() after a stop ends the step there: its output is not checkpointed."""
    control = RunControl()

    def long_step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        control.stop()
        ctx.check()
        raise AssertionError("check() must not return after a stop")

    result = Runner("checks", [add("a"), ("long", long_step)]).start(store, {}, control=control)
    assert (result.reason, result.last_step) == ("cancelled", "a")
    assert [n for n, _, _ in shape(store, result.thread_id)] == ["__start__", "a", "run_end"]


def test_abort_discards_the_step_in_flight(store: Store) -> None:
    """An abort drops the in-flight step's output even though it returned, and ends failed/aborted."""
    control = RunControl()

    def aborted(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        control.abort()
        return {**state, "b": True}

    result = Runner("abortable", [add("a"), ("b", aborted), add("c")]).start(
        store, {}, control=control
    )
    assert (result.status, result.reason, result.last_step, result.state) == (
        "failed",
        "aborted",
        "a",
        {"a": True},
    )
    assert [n for n, _, _ in shape(store, result.thread_id)] == ["__start__", "a", "run_end"]
    resumed = Runner("abortable", [add("a"), add("b"), add("c")]).resume(store, result.thread_id)
    assert resumed.state == {"a": True, "b": True, "c": True}, (
        "an aborted run resumes like any failed run"
    )


def test_stop_from_another_thread(store: Store) -> None:
    """A run blocked in a step on one thread is stopped by another thread's RunControl."""
    control = RunControl()
    entered, release = threading.Event(), threading.Event()

    def waits(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        entered.set()
        assert release.wait(20)
        return {**state, "waited": True}

    out: list[Any] = []
    worker = threading.Thread(
        target=lambda: out.append(
            Runner("blocked", [("waits", waits), add("after")]).start(store, {}, control=control)
        )
    )
    worker.start()
    assert entered.wait(20)
    control.stop()
    release.set()
    worker.join(20)
    assert (out[0].reason, out[0].last_step) == ("cancelled", "waits")


def test_stop_a_parked_run_from_outside(store: Store) -> None:
    """Runner.stop ends a parked run: its park is dropped, its run end written, its minted thread marked."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "nobody answers"})
    stopped = runner_defs.approval.stop(store, parked.thread_id, abort=True)
    assert (stopped.status, stopped.reason, stopped.last_step) == ("failed", "aborted", "draft")
    assert store.get_park(parked.thread_id) is None
    assert shape(store, parked.thread_id)[-1] == ("run_end", "run_end", "failed")
    record = store.thread(parked.thread_id)
    assert record is not None
    assert record.finished
    with pytest.raises(RunNotResumable, match="already failed"):
        runner_defs.approval.stop(store, parked.thread_id)


def test_run_timeout_ends_the_run_with_reason_timeout(store: Store, clock: FrozenClock) -> None:
    """Past the runner's timeout (on the store's clock) the run ends failed with reason timeout."""

    def slow(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        clock.advance(timedelta(minutes=10))
        return {**state, "slow": True}

    result = Runner("timed", [("slow", slow), add("next")], timeout=timedelta(minutes=5)).start(
        store, {}
    )
    assert (result.status, result.reason, result.last_step) == ("failed", "timeout", "slow")
    assert [n for n, _, _ in shape(store, result.thread_id)] == ["__start__", "slow", "run_end"]


# ---------------------------------------------------------------------------- fork


def test_fork_branches_a_new_thread_from_a_checkpoint(store: Store) -> None:
    """A fork writes a fork_origin row pointing at the source and runs on from the step after it."""
    runner = Runner("branchy", [add("a"), add("b"), add("c")])
    source = runner.start(store, {"v": 1})
    b_row = next(c for c in read_thread(store, source.thread_id) if c.node_id == "b")
    forked = runner.fork(
        store, source.thread_id, b_row.checkpoint_id, state={**b_row.state, "edited": True}
    )
    assert forked.thread_id != source.thread_id
    assert forked.run_id != source.run_id
    assert forked.state == {"v": 1, "a": True, "b": True, "edited": True, "c": True}
    rows = read_thread(store, forked.thread_id)
    assert [(c.node_id, c.step_type) for c in rows] == [
        ("b", "fork_origin"),
        ("c", "node"),
        ("run_end", "run_end"),
    ]
    assert rows[0].parent_checkpoint_id == b_row.checkpoint_id
    assert rows[0].metadata["run"]["fork_of"] == {
        "thread_id": source.thread_id,
        "checkpoint_id": b_row.checkpoint_id,
    }
    assert len(read_thread(store, source.thread_id)) == 5, "the source thread is untouched"
    latest = runner.fork(store, source.thread_id, new_thread_id="my-branch")
    assert latest.thread_id == "my-branch"
    assert read_thread(store, "my-branch")[0].node_id == "c", (
        "default: the last step, even of a completed run"
    )
    end = read_thread(store, source.thread_id)[-1]
    with pytest.raises(RunError, match="not a step; fork from the step before it"):
        runner.fork(store, source.thread_id, end.checkpoint_id)


# ---------------------------------------------------------------------------- leases


def test_heartbeat_keeps_the_lease_alive_through_a_long_step(
    target: StoreTarget, store: Store, clock: FrozenClock
) -> None:
    """While a step outlasts the lease ttl, the heartbeat renews it, so no other worker can take the thread."""
    seen: list[datetime] = []

    def long_step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        for _ in range(3):
            clock.advance(timedelta(seconds=20))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                record = ctx.store.thread(ctx.thread_id)
                if (
                    record is not None
                    and record.lease is not None
                    and record.lease.expires_at == clock() + timedelta(seconds=30)
                ):
                    seen.append(record.lease.expires_at)
                    break
                time.sleep(0.005)
        with target.open(clock=clock) as other, pytest.raises(LeaseHeld):
            other.acquire_lease(ctx.thread_id, "intruder", timedelta(seconds=30))
        return state

    result = Runner(
        "beats", [("long", long_step)], lease_ttl=timedelta(seconds=30), heartbeat=0.01
    ).start(store, {})
    assert result.status == "completed"
    assert seen == [START + timedelta(seconds=s + 30) for s in (20, 40, 60)], (
        "renewed after every advance, 60s into a 30s lease"
    )


@pytest.mark.parametrize("detected_by", ["write", "heartbeat"])
def test_lost_lease_stops_the_run_without_writing(
    target: StoreTarget, store: Store, clock: FrozenClock, detected_by: str
) -> None:
    """When another worker takes the expired lease, the run stops with LeaseLost: no more rows, no run end, no mark."""

    def overrun(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        # Another worker, an hour later by its clock, finds the lease expired and takes it.
        with target.open(clock=FrozenClock(clock() + timedelta(hours=1))) as other:
            other.acquire_lease(ctx.thread_id, "worker-b", timedelta(minutes=5))
        if detected_by == "heartbeat":
            deadline = time.monotonic() + 10
            while not ctx.cancelled and time.monotonic() < deadline:
                time.sleep(0.005)
            assert ctx.cancelled
            ctx.check()
        return {**state, "late": True}

    runner = Runner(
        "loses",
        [("overrun", overrun), add("after")],
        lease_ttl=timedelta(seconds=30),
        heartbeat=0.01 if detected_by == "heartbeat" else 3600,
    )
    with pytest.raises(LeaseLost, match="stopped without a run end") as info:
        runner.start(store, {})
    assert "worker-b" in str(info.value)
    thread_id = next(r.thread_id for r in store.iter_threads())
    assert [n for n, _, _ in shape(store, thread_id)] == ["__start__"]
    record = store.thread(thread_id)
    assert record is not None
    assert not record.finished
    assert record.lease is not None
    assert record.lease.holder == "worker-b"


def test_a_thread_leased_by_another_worker_is_refused(store: Store) -> None:
    """Starting on a thread another worker holds raises LeaseHeld; resuming it raises AlreadyResumed."""
    runner = Runner("busy", [add("a")])
    failed = Runner("busy", [("a", lambda s, c: 1 / 0)]).start(store, {}, thread_id="held")
    store.acquire_lease("held", "someone-else", timedelta(minutes=5))
    with pytest.raises(LeaseHeld, match="someone-else"):
        runner.start(store, {}, thread_id="held")
    with pytest.raises(AlreadyResumed, match="someone-else"):
        runner.resume(store, failed.thread_id)


def test_start_refuses_a_thread_with_a_parked_run(store: Store) -> None:
    """A new run never starts over a pending park: resume or stop that run first."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "t"}, thread_id="waiting")
    with pytest.raises(RunError, match="parked at step 'approve'"):
        runner_defs.approval.start(store, {"topic": "again"}, thread_id="waiting")
    assert store.get_park("waiting") == parked.park


# ---------------------------------------------------------------------------- ownership


def test_minted_thread_is_marked_in_its_own_providers_ledger(
    store: Store, clock: FrozenClock
) -> None:
    """A run with no thread id mints one and marks it finished in the store it ran on (a per-run provider), nowhere else."""
    deployment = memory(clock)  # the deployment's configured store; the run was given its own
    done = Runner("mints", [add("a")]).start(store, {}, deployment_store=deployment)
    failed = Runner("mints", [("a", lambda s, c: 1 / 0)]).start(
        store, {}, deployment_store=deployment
    )
    for result in (done, failed):
        record = store.thread(result.thread_id)
        assert result.thread_minted
        assert record is not None
        assert record.finished
        assert record.owner == "agent:mints"
        assert record.due_at == START + timedelta(days=7)
        assert deployment.thread(result.thread_id) is None
    resumed = Runner("mints", [add("a")]).resume(store, failed.thread_id)
    assert resumed.status == "completed"
    record = store.thread(failed.thread_id)
    assert record is not None
    assert record.finished


def test_minted_thread_of_a_parked_run_waits_until_its_end(store: Store) -> None:
    """A minted thread is not marked at a park, is unmarked when the run resumes, and is marked at its end."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "t"})
    record = store.thread(parked.thread_id)
    assert record is not None
    assert not record.finished
    store.mark_finished(parked.thread_id)  # a stale mark: the resume must take it out first
    seen: list[bool] = []

    def check_unmarked(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        rec = ctx.store.thread(ctx.thread_id)
        seen.append(rec is not None and rec.finished)
        return runner_defs.publish(state, ctx)

    runner = Runner(
        "approval", [runner_defs.draft, runner_defs.approve, ("publish", check_unmarked)]
    )
    assert runner.resume(store, parked.thread_id, {"approved": True}).status == "completed"
    assert seen == [False]
    record = store.thread(parked.thread_id)
    assert record is not None
    assert record.finished


def test_caller_supplied_thread_is_unmarked_at_start_and_never_marked(store: Store) -> None:
    """A caller-supplied thread leaves the finished set when the run starts and is not marked at its end."""
    store.record_run_start("mine", run_id="before", owner="caller")
    store.mark_finished("mine")
    seen: list[bool] = []

    def look(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        rec = ctx.store.thread(ctx.thread_id)
        seen.append(rec is not None and rec.finished)
        return state

    for step in (("look", look), ("boom", lambda s, c: 1 / 0)):
        result = Runner("guest", [step]).start(store, {}, thread_id="mine", owner="orders")
        assert not result.thread_minted
        record = store.thread("mine")
        assert record is not None
        assert not record.finished
        assert record.owner == "orders"
    assert seen == [False]


def test_conversation_thread_is_never_marked(store: Store, clock: FrozenClock) -> None:
    """Turns of a conversation each start a run on its thread and never mark it: it leaves on the waiting horizon."""
    assistant = Runner(
        "assistant", [("reply", lambda s, c: {**s, "replies": s.get("replies", 0) + 1})]
    )
    for turn in range(3):
        clock.set(START + timedelta(days=turn * 4))
        assistant.start(store, {"turn": turn}, thread_id="conversation-1", owner="conversations")
    record = store.thread("conversation-1")
    assert record is not None
    assert not record.finished
    assert record.due_at is None
    assert record.owner == "conversations"
    assert record.newest_at == START + timedelta(days=8)
    assert len({r.run_id for r in list_runs(store) if r.thread_id == "conversation-1"}) == 3


def test_declared_retention_is_recorded_and_checked_at_start(store: Store) -> None:
    """The runner's declared retention is recorded at run start; one above the platform's is refused before anything is written."""
    result = Runner("short", [add("a")], retention={"waiting": "10d", "finished": "1d"}).start(
        store, {}
    )
    record = store.thread(result.thread_id)
    assert record is not None
    assert (record.declared_waiting, record.declared_finished) == (
        timedelta(days=10),
        timedelta(days=1),
    )
    assert record.due_at == START + timedelta(days=1)
    with pytest.raises(RetentionError, match="longer than the platform's waiting retention"):
        Runner("long", [add("a")], retention={"waiting": "90d"}).start(
            store, {}, thread_id="never-written"
        )
    assert store.thread("never-written") is None


def _support_flow(agent_store: Store, gate: Callable[[Any, RunContext], Any]) -> Flow:
    triage = Runner("triage", [("classify", lambda s, c: {**s, "category": "billing"})])
    chat = Runner("chat", [("reply", lambda s, c: {**s, "replied": True})])
    return Flow(
        "support",
        [
            add("intake"),
            AgentNode("triage", triage, "{flow_run_id}-triage", store=agent_store),
            AgentNode("chat", chat, "{thread_id}-chat", store=agent_store),
            ("gate", gate),
            add("close"),
        ],
        retention={"finished": "2d"},
    )


@pytest.mark.parametrize("terminal", ["success", "error", "stop", "abort"])
def test_flow_marks_its_thread_and_owned_session_threads_at_every_terminal(
    store: Store, clock: FrozenClock, terminal: str
) -> None:
    """A flow marks its thread (its store) and its {flow_run_id} session threads (the deployment's ledger) at success, error, stop and abort."""
    deployment, agents = memory(clock), memory(clock)
    control = RunControl()

    def gate(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if terminal == "error":
            raise PermissionError("refund limit")
        if terminal in ("stop", "abort"):
            getattr(control, terminal)()
        return {**state, "gated": True}

    flow = _support_flow(agents, gate)
    result = flow.start(
        store,
        {"customer": "c-1"},
        thread_id="session-1",
        control=control,
        deployment_store=deployment,
    )
    reason = {"success": None, "error": "error", "stop": "cancelled", "abort": "aborted"}[terminal]
    assert result.reason == reason
    own = store.thread("session-1")
    assert own is not None
    assert own.finished
    assert own.owner == "flow:support"
    assert own.due_at == START + timedelta(days=2), "the flow's declared finished retention"
    owned, shared = f"{result.run_id}-triage", "session-1-chat"
    assert flow.session_threads(result.run_id, "session-1") == [owned]
    marked = deployment.thread(owned)
    assert marked is not None
    assert marked.finished, "owned session threads are marked in the deployment's ledger"
    assert deployment.thread(shared) is None, (
        "a session thread without {flow_run_id} is not the flow's"
    )
    agent_owned, agent_shared = agents.thread(owned), agents.thread(shared)
    assert agent_owned is not None
    assert not agent_owned.finished, "the agent's provider ledger is not the deployment's"
    assert agent_owned.owner == "flow:support"
    assert agent_shared is not None
    assert not agent_shared.finished
    assert agent_shared.owner == "caller"
    assert store.thread(owned) is None


def test_flow_is_never_marked_at_a_pause_and_unmarks_everything_on_resume(
    store: Store, clock: FrozenClock
) -> None:
    """A parked flow marks nothing; its resume takes its thread and owned threads out of the finished set first."""
    needs_parks(store)
    deployment, agents = memory(clock), memory(clock)
    seen: list[tuple[bool, bool]] = []

    def gate(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        answer = ctx.interrupt("approve the refund", {"amount": 12}, deadline=timedelta(days=1))
        own, owned = ctx.store.thread(ctx.thread_id), deployment.thread(f"{ctx.run_id}-triage")
        seen.append((own is not None and own.finished, owned is not None and owned.finished))
        return {**state, "approved": answer}

    flow = _support_flow(agents, gate)
    parked = flow.start(store, {}, deployment_store=deployment)
    owned = f"{parked.run_id}-triage"
    assert parked.status == "parked"
    own = store.thread(parked.thread_id)
    assert own is not None
    assert not own.finished
    assert deployment.thread(owned) is None
    store.mark_finished(parked.thread_id)
    deployment.mark_finished(owned)
    done = flow.resume(store, parked.thread_id, True, deployment_store=deployment)
    assert done.status == "completed"
    assert seen == [(False, False)]
    own, marked = store.thread(parked.thread_id), deployment.thread(owned)
    assert own is not None
    assert own.finished
    assert marked is not None
    assert marked.finished


def test_step_mode_runs_one_step_at_a_time_and_ends_on_the_last(
    store: Store, clock: FrozenClock
) -> None:
    """start(max_steps=1) and step() advance one step each with no run end or mark; the last step ends the run."""
    runner = Runner("three", [add("a", 1), add("b", 2), add("c", 3)])
    first = runner.start(store, {"input": 0}, max_steps=1)
    assert (first.status, first.last_step, first.state) == ("paused", "a", {"input": 0, "a": 1})
    assert shape(store, first.thread_id) == [
        ("__start__", "run_start", "completed"),
        ("a", "node", "completed"),
    ]
    assert first.checkpoint_id == read_thread(store, first.thread_id)[-1].checkpoint_id
    record = store.thread(first.thread_id)
    assert record is not None
    assert (record.finished, record.lease) == (False, None), "a pause is not a terminal"
    clock.advance(timedelta(hours=1))
    assert [r.status for r in list_runs(store) if r.thread_id == first.thread_id] == ["stalled"]
    second = runner.step(store, first.thread_id)
    assert (second.status, second.last_step, second.run_id) == ("paused", "b", first.run_id)
    last = runner.step(store, first.thread_id)
    assert (last.status, last.last_step) == ("completed", "c")
    assert last.state == {"input": 0, "a": 1, "b": 2, "c": 3}
    assert [row[0] for row in shape(store, first.thread_id)] == [
        "__start__",
        "a",
        "b",
        "c",
        "run_end",
    ]
    record = store.thread(first.thread_id)
    assert record is not None
    assert record.finished, "the step that completes a minted run marks it"
    with pytest.raises(RunNotResumable, match="already completed"):
        runner.step(store, first.thread_id)


def test_step_mode_with_more_steps_than_remain_runs_to_the_end(store: Store) -> None:
    """max_steps larger than what is left completes the run; resume(max_steps=2) pauses after two."""
    runner = Runner("four", [add("a"), add("b"), add("c"), add("d")])
    paused = runner.start(store, {}, thread_id="t-steps", max_steps=1)
    two = runner.resume(store, "t-steps", max_steps=2)
    assert (two.status, two.last_step) == ("paused", "c")
    done = runner.resume(store, "t-steps", max_steps=5)
    assert (done.status, done.last_step, done.run_id) == ("completed", "d", paused.run_id)


def test_step_mode_refuses_a_bad_step_count_before_writing(store: Store) -> None:
    """max_steps of 0, a negative number, a bool or a float is refused naming the value; nothing is written."""
    runner = Runner("one", [add("a")])
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match=f"max_steps={bad!r}"):
            runner.start(store, {}, thread_id="t-bad-steps", max_steps=bad)  # type: ignore[arg-type]
    assert store.latest("t-bad-steps") is None
    runner.start(store, {}, thread_id="t-bad-steps", max_steps=1)
    with pytest.raises(ConfigError, match="max_steps=0"):
        runner.resume(store, "t-bad-steps", max_steps=0)


def test_step_on_a_parked_run_answers_the_ask_then_pauses(store: Store) -> None:
    """step() with a value runs the parked step with the answer and pauses before the next one."""
    needs_parks(store)
    parked = runner_defs.approval.start(store, {"topic": "retention"})
    assert parked.status == "parked"
    stepped = runner_defs.approval.step(store, parked.thread_id, {"approved": True})
    assert (stepped.status, stepped.last_step) == ("paused", "approve")
    assert stepped.state["approved"] is True
    assert "published" not in stepped.state
    assert store.get_park(parked.thread_id) is None
    done = runner_defs.approval.step(store, parked.thread_id)
    assert (done.status, done.state["published"]) == ("completed", True)


def test_flow_step_unmarks_at_start_and_marks_only_at_its_terminal(
    store: Store, clock: FrozenClock
) -> None:
    """Seed 004: a step run on a flow's session unmarks its threads, a pause marks nothing, the last step marks them."""
    deployment, agents = memory(clock), memory(clock)
    flow = _support_flow(agents, add("gated"))
    first = flow.start(store, {}, thread_id="session-s", deployment_store=deployment, max_steps=2)
    owned = f"{first.run_id}-triage"
    assert (first.status, first.last_step) == ("paused", "triage")
    assert not store.thread("session-s").finished  # type: ignore[union-attr]
    store.mark_finished("session-s")
    deployment.mark_finished(owned)
    second = flow.step(store, "session-s", deployment_store=deployment)
    assert (second.status, second.last_step) == ("paused", "chat")
    assert not store.thread("session-s").finished, "the step's start unmarked it"  # type: ignore[union-attr]
    assert not deployment.thread(owned).finished, "and the session thread it owns"  # type: ignore[union-attr]
    done = flow.resume(store, "session-s", deployment_store=deployment)
    assert done.status == "completed"
    assert store.thread("session-s").finished  # type: ignore[union-attr]
    assert deployment.thread(owned).finished  # type: ignore[union-attr]


def test_flow_parks_on_its_agents_ask_and_resume_answers_the_agent(store: Store) -> None:
    """When an agent node's agent parks, the flow parks on the same ask; resuming the flow resumes the agent."""
    needs_parks(store)
    flow = Flow(
        "review",
        [
            add("intake"),
            AgentNode("approval", runner_defs.approval, "{flow_run_id}-approval"),
            add("close"),
        ],
    )
    parked = flow.start(store, {"topic": "flows"})
    assert parked.status == "parked"
    assert parked.park is not None
    assert parked.park.reason == "needs approval"
    agent_thread = f"{parked.run_id}-approval"
    assert store.get_park(agent_thread) is not None, "the agent's own park is pending too"
    done = flow.resume(store, parked.thread_id, {"approved": True})
    assert done.status == "completed"
    assert done.state["published"] is True
    assert done.state["close"] is True
    assert store.get_park(agent_thread) is None
    agent = store.thread(agent_thread)
    assert agent is not None
    assert agent.finished, "the flow owns the agent's {flow_run_id} thread (deployment = its store)"
    assert shape(store, agent_thread)[-1] == ("run_end", "run_end", "completed")


# ---------------------------------------------------------------------------- definitions and lookup


def test_definitions_refuse_bad_steps_templates_and_retention() -> None:
    """Duplicate or reserved step names, unknown template fields and retention keys are refused clearly."""
    with pytest.raises(ConfigError, match="two steps are named 'a'"):
        Runner("dup", [add("a"), add("a")])
    with pytest.raises(ConfigError, match="reserved"):
        Runner("reserved", [("run_end", add("x"))])
    with pytest.raises(ConfigError, match=r"uses \['customer'\]"):
        AgentNode("n", Runner("x", [add("a")]), "{customer}-chat")
    with pytest.raises(ConfigError, match="unknown"):
        Runner("r", [add("a")], retention={"forever": "1d"})


def test_load_runner_accepts_runners_and_factories() -> None:
    """module:attr names a Runner or a factory; anything else is refused naming the spec."""
    assert load_runner("runner_defs:approval") is runner_defs.approval
    assert load_runner("runner_defs:make_approval") is runner_defs.approval
    with pytest.raises(RunError, match="module:attr"):
        load_runner("runner_defs")
    with pytest.raises(RunError, match="does not import"):
        load_runner("no_such_module_here:x")
    with pytest.raises(RunError, match="no attribute"):
        load_runner("runner_defs:missing")
    with pytest.raises(RunError, match="not a Runner"):
        load_runner("runner_defs:HANG")


def test_list_runs_reports_every_status(store: Store, clock: FrozenClock) -> None:
    """list_runs shows completed, failed (reason), parked (time left), running (lease), stalled and abandoned runs."""
    Runner("r", [add("a")]).start(store, {}, thread_id="t-done")
    Runner("r", [("a", lambda s, c: 1 / 0)]).start(store, {}, thread_id="t-failed")
    store.put(
        Checkpoint(
            thread_id="t-stalled", run_id="old", runner="r", node_id="a", step_type=STEP_NODE
        )
    )
    store.put(
        Checkpoint(
            thread_id="t-stalled", run_id="new", runner="r", node_id="a", step_type=STEP_NODE
        )
    )
    store.put(
        Checkpoint(
            thread_id="t-running", run_id="live", runner="r", node_id="a", step_type=STEP_NODE
        )
    )
    store.acquire_lease("t-running", "worker-x", timedelta(minutes=1), run_id="live")
    if store.capabilities.can_park:
        runner_defs.approval.start(store, {}, thread_id="t-parked")
    clock.advance(timedelta(hours=1))
    runs = {(r.thread_id, r.run_id): r for r in list_runs(store)}
    by_thread = {r.thread_id: r for r in runs.values() if r.run_id not in ("old",)}
    assert by_thread["t-done"].status == "completed"
    assert by_thread["t-done"].steps == 1
    assert (by_thread["t-failed"].status, by_thread["t-failed"].reason) == ("failed", "error")
    assert by_thread["t-failed"].error == "ZeroDivisionError: division by zero"
    assert runs[("t-stalled", "old")].status == "abandoned"
    assert runs[("t-stalled", "new")].status == "stalled"
    assert by_thread["t-running"].status == "stalled", "its lease expired an hour ago"
    if store.capabilities.can_park:
        parked = by_thread["t-parked"]
        assert (parked.status, parked.last_step, parked.park_reason) == (
            "parked",
            "approve",
            "needs approval",
        )
        assert parked.time_left == timedelta(days=2) - timedelta(hours=1)
    store.acquire_lease("t-running", "worker-x", timedelta(minutes=1), run_id="live")
    live = next(r for r in list_runs(store) if r.thread_id == "t-running")
    assert (live.status, live.lease_holder) == ("running", "worker-x")


def test_no_value_is_distinct_from_none() -> None:
    """NO_VALUE (no answer given) is not None (an answer)."""
    assert NO_VALUE is not None
    assert repr(NO_VALUE) == "NO_VALUE"


def test_values_no_store_can_hold_are_refused_without_a_trace(store: Store) -> None:
    """An unencodable input or answer is refused before the thread is touched; an unencodable step output fails the run."""
    runner = Runner("codec", [("bad", lambda s, c: {**s, "x": float("nan")})])
    with pytest.raises(CodecError, match=r"state\.x"):
        runner.start(store, {"x": float("inf")}, thread_id="never")
    assert store.thread("never") is None
    result = runner.start(store, {})
    assert (result.status, result.last_step) == ("failed", None)
    assert result.error is not None
    assert result.error.startswith("CodecError")
    assert "state.x" in result.error
    if store.capabilities.can_park:
        parked = runner_defs.approval.start(store, {"topic": "t"})
        with pytest.raises(CodecError, match="value"):
            runner_defs.approval.resume(store, parked.thread_id, {"approved": float("nan")})
        assert store.get_park(parked.thread_id) == parked.park


def test_a_run_asked_to_stop_never_parks(store: Store) -> None:
    """A step that asks after a stop was requested ends the run cancelled instead of parking it."""
    control = RunControl()

    def ask(state: Any, ctx: RunContext) -> Any:
        control.stop()
        return ctx.interrupt("too late", deadline=timedelta(hours=1))

    result = Runner("late", [("ask", ask)]).start(store, {}, control=control)
    assert (result.status, result.reason) == ("failed", "cancelled")
    assert pending_parks(store) == []


def test_a_naive_deadline_fails_the_run_naming_it(store: Store) -> None:
    """An ask whose deadline has no timezone is refused by name, never guessed."""

    def ask(state: Any, ctx: RunContext) -> Any:
        return ctx.interrupt("when?", deadline=datetime(2026, 3, 3, 9, 0))

    result = Runner("naive", [("ask", ask)]).start(store, {})
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("ConfigError")
    assert "naive datetime" in result.error
