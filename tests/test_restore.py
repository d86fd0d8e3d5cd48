"""Restore-anywhere against the real plane on loopback: plan, apply, resume-time restore, the CLI.

"Machine A" is a replicating SQLite store connected to the plane; its runs are drained there.
"Another machine" is a fresh store on every provider (``target``), which has never heard of the
run. Both share one frozen clock, so deadlines and horizons are exact.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import runner_defs
from click.testing import CliRunner
from plane_support import PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.cli import cli
from durability.clock import FrozenClock
from durability.errors import (
    AlreadyResumed,
    CheckpointStoreFormatError,
    RestoreError,
    RunNotResumable,
)
from durability.replication import Connection, PlaneClient, connect, disconnect
from durability.restore import (
    ENV_RESTORE,
    FRAME_COLUMNS,
    apply_restore,
    plan_restore,
    restore_from_plane,
    restore_if_missing,
)
from durability.runs import RunContext, Runner, read_thread
from durability.settings import Settings
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.testing import StoreTarget

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture
def machine_a(tmp_path: Path, clock: FrozenClock) -> Iterator[Store]:
    """The machine that ran the runs: a SQLite store that can park."""
    with durability.open(
        f"sqlite:///{tmp_path / 'machine-a.db'}",
        settings=Settings(),
        single_worker=True,
        clock=clock,
    ) as store:
        yield store
    disconnect(store, timeout=5)


@pytest.fixture
def fresh(target: StoreTarget, clock: FrozenClock) -> Iterator[Store]:
    """Another machine's store, on every provider: it has never heard of the runs."""
    with target.open(clock=clock) as store:
        yield store
    disconnect(store, timeout=5)


def link(store: Store, plane: PlaneHandle) -> Connection:
    return connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())


@contextmanager
def on_plane(store: Store, plane: PlaneHandle) -> Iterator[None]:
    """Run the block connected, then drain synchronously: everything it wrote is on the plane."""
    conn = link(store, plane)
    yield
    assert conn.close(timeout=10)
    assert all(e.state == "synced" for e in store.outbox())


def needs_parks(store: Store) -> None:
    if not store.capabilities.can_park:
        pytest.skip(
            f"the {store.provider} store cannot hold a parked run (tested by the refusal test)"
        )


def shape(store: Store, thread_id: str) -> list[tuple[str, str | None, str]]:
    return [(c.node_id, c.step_type, c.status) for c in read_thread(store, thread_id)]


def essence(cp: Checkpoint) -> tuple[Any, ...]:
    """What a restore must carry over exactly (everything but the store's own seq and size)."""
    return (
        cp.thread_id,
        cp.namespace,
        cp.checkpoint_id,
        cp.run_id,
        cp.runner,
        cp.node_id,
        cp.step,
        cp.step_type,
        cp.status,
        cp.state,
        cp.node_input,
        cp.node_output,
        cp.interrupt_reason,
        cp.interrupt_context,
        cp.metadata,
        cp.created_at,
    )


# A runner whose middle step fails on machine A and works on the other machine.
CALLS: dict[str, int] = {}
BROKEN = {"b": True}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def step_a(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    _count("a")
    return {**state, "a": "done on " + state["machine"]}


def step_b(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    _count("b")
    if BROKEN["b"]:
        raise ConnectionError("payment gateway down")
    return {**state, "b": "paid"}


def step_c(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    _count("c")
    return {**state, "c": "shipped"}


flaky = Runner("flaky", [("a", step_a), ("b", step_b), ("c", step_c)])


@pytest.fixture
def failed_on_a(machine_a: Store, plane: PlaneHandle) -> Iterator[str]:
    """A run that failed at step b on machine A, replicated; its thread id."""
    CALLS.clear()
    BROKEN["b"] = True
    with on_plane(machine_a, plane):
        result = flaky.start(machine_a, {"machine": "A"})
    assert (result.status, result.reason) == ("failed", "error")
    BROKEN["b"] = False
    CALLS.clear()
    yield result.thread_id
    BROKEN["b"] = True


# ---------------------------------------------------------------------------- another machine


def test_parked_run_restored_on_another_machine_resumes_to_completion(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """A run parked on machine A resumes with its answer on a fresh store: restored (history and
    park, with the ask's own deadline) at resume, then run to completion there."""
    needs_parks(fresh)
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "restore"})
    original = read_thread(machine_a, parked.thread_id)
    assert parked.park is not None
    conn = link(fresh, plane)
    assert not fresh.has_thread(parked.thread_id)
    result = runner_defs.approval.resume(
        fresh, parked.thread_id, {"approved": True}, connection=conn
    )
    assert result.status == "completed"
    assert result.state["published"] is True
    assert result.run_id == parked.run_id
    rows = read_thread(fresh, parked.thread_id)
    assert [essence(c) for c in rows[: len(original)]] == [essence(c) for c in original]
    assert [n for n, _, _ in shape(fresh, parked.thread_id)] == [
        "__start__",
        "draft",
        "approve",
        "approve",
        "publish",
        "run_end",
    ]
    assert fresh.get_park(parked.thread_id) is None, "the resume claimed the restored park"
    assert conn.close(timeout=10)
    assert plane.ids_on_plane(parked.thread_id) == [c.checkpoint_id for c in rows], (
        "the continuation replicated, and the restored rows were not sent twice"
    )


def test_restored_park_keeps_the_declared_deadline(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """restore_from_plane re-creates the pending park with the deadline the ask declared."""
    needs_parks(fresh)
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "deadline"})
    assert parked.park is not None
    latest = restore_from_plane(fresh, parked.thread_id, link(fresh, plane))
    assert latest is not None
    assert latest.status == "interrupted"
    park = fresh.get_park(parked.thread_id)
    assert park is not None
    assert (park.deadline, park.deadline_source) == (parked.park.deadline, "declared")
    assert (park.reason, park.context, park.checkpoint_id) == (
        "needs approval",
        {"draft": "about deadline"},
        latest.checkpoint_id,
    )


def test_failed_run_resumes_from_its_last_real_step_after_a_restore(
    failed_on_a: str, fresh: Store, plane: PlaneHandle
) -> None:
    """A run that failed on machine A resumes on a fresh store from its last real step (the
    history was restored): step a is not run again."""
    conn = link(fresh, plane)
    result = flaky.resume(fresh, failed_on_a, connection=conn)
    assert result.status == "completed"
    assert result.state == {"machine": "A", "a": "done on A", "b": "paid", "c": "shipped"}
    assert CALLS == {"b": 1, "c": 1}
    assert [n for n, _, _ in shape(fresh, failed_on_a)] == [
        "__start__",
        "a",
        "run_end",
        "b",
        "c",
        "run_end",
    ]


def test_completed_run_is_refused_after_a_restore(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """A completed run restored at resume is refused as completed; its minted thread is marked
    finished again (the ledger is not replicated, the run facts are)."""
    runner = Runner("done", [("a", step_a)])
    with on_plane(machine_a, plane):
        done = runner.start(machine_a, {"machine": "A"})
    with pytest.raises(RunNotResumable, match="already completed"):
        runner.resume(fresh, done.thread_id, connection=link(fresh, plane))
    assert [n for n, _, _ in shape(fresh, done.thread_id)] == ["__start__", "a", "run_end"]
    record = fresh.thread(done.thread_id)
    assert record is not None
    assert record.owner == "agent:done"
    assert record.finished


def test_two_concurrent_resumers_on_a_fresh_store_one_wins(
    target: StoreTarget, machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """Two workers resume the same lost park at once on a fresh store: the thread is restored
    once, one worker runs the parked step, the other gets AlreadyResumed."""
    needs_parks(fresh)
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "race"})
    conn = link(fresh, plane)
    handles = [target.open(clock=fresh.clock) for _ in range(2)]
    results, losers, ran = runner_defs.race_resumes(handles, parked.thread_id, connection=conn)
    assert [r.status for r in results] == ["completed"]
    assert ran == 1
    assert len(losers) == 1
    assert isinstance(losers[0], AlreadyResumed), losers
    approvals = [c for c in read_thread(fresh, parked.thread_id) if c.node_id == "approve"]
    assert [c.step_type for c in approvals] == ["hitl_pause", "node"], "restored once, ran once"


def test_a_park_is_refused_where_the_store_cannot_hold_one(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """Restoring a parked run into a store that cannot hold a park is refused, naming the option
    (single_worker=True for SQLite, a shared store otherwise), and nothing is written."""
    if fresh.capabilities.can_park:
        pytest.skip("this store holds parks (tested by the resume tests)")
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "nowhere"})
    option = "single_worker=True" if fresh.provider == "sqlite" else "shared store"
    conn = link(fresh, plane)
    plan = plan_restore(fresh, parked.thread_id, conn)
    assert plan.park is not None
    assert plan.refusal is not None
    assert option in plan.refusal
    assert any(option in w for w in plan.warnings)
    with pytest.raises(RestoreError, match=option):
        apply_restore(fresh, plan)
    with pytest.raises(RestoreError, match=option):
        runner_defs.approval.resume(fresh, parked.thread_id, {"approved": True}, connection=conn)
    assert not fresh.has_thread(parked.thread_id)
    assert fresh.thread(parked.thread_id) is None
    assert pending_parks(fresh) == []


# ---------------------------------------------------------------------------- the three rules and the switch


def test_the_local_copy_wins_and_the_plane_is_not_asked(
    failed_on_a: str, fresh: Store, plane: PlaneHandle
) -> None:
    """Only when missing: a thread the store already holds is resumed from the local copy, and
    no request reaches the plane."""
    fresh.put(
        Checkpoint(
            thread_id=failed_on_a,
            runner="flaky",
            run_id="local-run",
            node_id="a",
            step=0,
            step_type="node",
            state={"machine": "B", "a": "done on B"},
        )
    )
    conn = link(fresh, plane)
    reads = plane.faults.checkpoint_reads
    result = flaky.resume(fresh, failed_on_a, connection=conn)
    assert result.state["a"] == "done on B"
    assert plane.faults.checkpoint_reads == reads
    assert restore_if_missing(fresh, failed_on_a, conn) is None
    assert plane.faults.checkpoint_reads == reads


def test_not_connected_or_switched_off_a_missing_thread_fails_as_it_always_did(
    failed_on_a: str, fresh: Store, plane: PlaneHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only when connected, never when switched off: without a connection, or connected with
    DURABILITY_RESTORE_FROM_PLANE=off, resume, fork and stop refuse a missing thread saying why,
    and nothing is asked of the plane; connected and on, fork restores it first."""
    reads = plane.faults.checkpoint_reads
    for call in (
        lambda: flaky.resume(fresh, failed_on_a),
        lambda: flaky.fork(fresh, failed_on_a),
        lambda: flaky.stop(fresh, failed_on_a),
    ):
        with pytest.raises(RunNotResumable, match="not connected to a plane"):
            call()
    assert restore_from_plane(fresh, failed_on_a) is None
    conn = link(fresh, plane)
    monkeypatch.setenv(ENV_RESTORE, "off")
    for call in (
        lambda: flaky.resume(fresh, failed_on_a, connection=conn),
        lambda: flaky.fork(fresh, failed_on_a, connection=conn),
        lambda: flaky.stop(fresh, failed_on_a, connection=conn),
    ):
        with pytest.raises(RunNotResumable, match="restore from the plane is off"):
            call()
    assert plane.faults.checkpoint_reads == reads
    assert not fresh.has_thread(failed_on_a)
    monkeypatch.delenv(ENV_RESTORE)
    forked = flaky.fork(fresh, failed_on_a, connection=conn)
    assert forked.status == "completed"
    assert fresh.has_thread(failed_on_a)
    assert CALLS == {"b": 1, "c": 1}


def test_a_thread_the_plane_lacks_too_is_refused_naming_the_plane(
    fresh: Store, plane: PlaneHandle
) -> None:
    """A thread neither the store nor the plane holds is refused, saying the plane had none."""
    with pytest.raises(RunNotResumable, match="holds none either"):
        flaky.resume(fresh, "never-ran", connection=link(fresh, plane))
    assert not fresh.has_thread("never-ran")


def test_a_plane_that_does_not_answer_fails_the_resume_clearly(
    fresh: Store, plane: PlaneHandle
) -> None:
    """A missing thread with a plane that cannot be reached fails the resume with a RestoreError
    naming the plane (retry later), never with the key, and writes nothing."""
    dead = connect(fresh, "http://127.0.0.1:9", plane.key, verify=False, timeout=2)
    try:
        with pytest.raises(RestoreError, match=r"127\.0\.0\.1:9 did not answer") as caught:
            flaky.resume(fresh, "lost-thread", connection=dead)
        assert plane.key not in str(caught.value)
        assert fresh.thread("lost-thread") is None
    finally:
        dead.close(timeout=1)


@pytest.mark.parametrize(
    ("value", "restores", "warns"),
    [
        ("0", False, False),
        ("false", False, False),
        ("No", False, False),
        (" OFF ", False, False),
        ("disabled", False, True),
        ("", True, False),
        (None, True, False),
        ("on", True, False),
    ],
    ids=["0", "false", "No", "OFF-padded", "disabled", "empty", "unset", "on"],
)
def test_the_switch_in_every_spelling(
    failed_on_a: str,
    tmp_path: Path,
    clock: FrozenClock,
    plane: PlaneHandle,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str | None,
    restores: bool,
    warns: bool,
) -> None:
    """DURABILITY_RESTORE_FROM_PLANE: 0/false/no/off in any case, trimmed, turn resume-time restore
    off before any request; an unknown value also turns it off, with a WARNING; unset or empty
    leave it on. (The parser is provider-independent: every provider is covered by the test above.)"""
    fresh = durability.open(f"sqlite:///{tmp_path / 'b.db'}", settings=Settings(), clock=clock)
    if value is None:
        monkeypatch.delenv(ENV_RESTORE, raising=False)
    else:
        monkeypatch.setenv(ENV_RESTORE, value)
    conn = link(fresh, plane)
    reads = plane.faults.checkpoint_reads
    with caplog.at_level(logging.WARNING, logger="durability.restore"):
        if restores:
            assert flaky.resume(fresh, failed_on_a, connection=conn).status == "completed"
            assert plane.faults.checkpoint_reads > reads
        else:
            with pytest.raises(
                RunNotResumable, match=f"restore from the plane is off \\({ENV_RESTORE}"
            ):
                flaky.resume(fresh, failed_on_a, connection=conn)
            assert plane.faults.checkpoint_reads == reads, "a request reached the plane"
            assert not fresh.has_thread(failed_on_a)
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and ENV_RESTORE in r.message
    ]
    assert bool(warnings) == warns
    if warns:
        assert "fail closed" in warnings[0].message
    disconnect(fresh, timeout=5)
    fresh.close()


# ---------------------------------------------------------------------------- plan and apply


def test_the_dry_run_plan_is_exactly_what_apply_writes(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """plan_restore reads and writes nothing; apply_restore writes exactly the planned rows, in
    order, every namespace, as already synced; the frame has the documented columns."""
    thread = "order-42"
    with on_plane(machine_a, plane):
        flaky.start(machine_a, {"machine": "A"}, thread_id=thread)
        machine_a.put(
            Checkpoint(thread_id=thread, namespace="child:1", node_id="sub", state={"n": 1})
        )
        flaky.resume(machine_a, thread)
    conn = link(fresh, plane)
    plan = plan_restore(fresh, thread, conn)
    assert not fresh.has_thread(thread)
    assert fresh.thread(thread) is None
    assert plan.source == "history"
    assert plan.refusal is None
    assert plan.local is None
    assert plan.park is None
    frame = plan.to_frame()
    assert list(frame.columns) == list(FRAME_COLUMNS)
    assert list(frame["checkpoint_id"]) == [c.checkpoint_id for c in plan.checkpoints]
    assert list(frame["order"]) == list(range(1, len(plan.checkpoints) + 1))
    assert frame.attrs["source"] == "history"
    result = apply_restore(fresh, plan)
    written = fresh.history(thread, None)
    assert [essence(c) for c in written] == [essence(c) for c in plan.checkpoints]
    assert [essence(c) for c in written] == [essence(c) for c in machine_a.history(thread, None)]
    assert [c.checkpoint_id for c in result.checkpoints] == [c.checkpoint_id for c in written]
    assert result.latest == fresh.latest(thread)
    if fresh.outbox is not None:
        assert {e.state for e in fresh.outbox(thread_id=thread)} == {"synced"}


def test_apply_never_overwrites_a_local_thread_silently(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """A thread the store already holds is refused (the store left as it was) unless
    overwrite=True, which replaces it with the plane's copy and says what it replaced."""
    thread = "twice"
    with on_plane(machine_a, plane):
        flaky.start(machine_a, {"machine": "A"}, thread_id=thread)
    mine = fresh.put(Checkpoint(thread_id=thread, node_id="local-only", state={"mine": True}))
    with PlaneClient(plane.url, plane.key) as client:  # not connected: the local row stays unsent
        plan = plan_restore(fresh, thread, client=client)
    assert plan.local is not None
    assert plan.local.checkpoints == 1
    assert any("already holds thread" in w for w in plan.warnings)
    with pytest.raises(RestoreError, match="overwrite=True"):
        apply_restore(fresh, plan)
    assert [c.checkpoint_id for c in fresh.history(thread)] == [mine.checkpoint_id]
    result = apply_restore(fresh, plan, overwrite=True)
    assert result.replaced is not None
    assert result.replaced.checkpoints == 1
    assert result.replaced.unsynced == (1 if (fresh.outbox is not None) else 0)
    assert result.deleted is not None
    assert result.deleted.checkpoints == 1
    assert [c.checkpoint_id for c in fresh.history(thread)] == [
        c.checkpoint_id for c in machine_a.history(thread)
    ]


def test_apply_refuses_a_store_in_another_format_generation(
    target: StoreTarget, machine_a: Store, plane: PlaneHandle
) -> None:
    """A store written in another format generation is refused by apply, and the plan says so."""
    with on_plane(machine_a, plane):
        flaky.start(machine_a, {"machine": "A"}, thread_id="gen")
    with target.open() as old:
        old.put(Checkpoint(thread_id="other"))
        old._write_generation(99)
    with target.open() as old, PlaneClient(plane.url, plane.key) as client:
        plan = plan_restore(old, "gen", client=client)
        assert plan.refusal is not None
        assert "format generation 99" in plan.refusal
        assert len(plan.checkpoints) == 3
        with pytest.raises(CheckpointStoreFormatError, match="durability store reset"):
            apply_restore(old, plan)
        old.reset()
        assert not old.has_thread("gen")


def test_restored_rows_are_never_sent_back(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """Rows a restore writes are already synced: the plane sees no second ingest of them."""
    if fresh.outbox is None:
        pytest.skip("this store keeps no outbox")
    with on_plane(machine_a, plane):
        flaky.start(machine_a, {"machine": "A"}, thread_id="once")
    conn = link(fresh, plane)
    sent = plane.faults.ingest_requests
    assert restore_from_plane(fresh, "once") is not None, "found through the store's connection"
    assert conn.close(timeout=10)
    assert plane.faults.ingest_requests == sent
    assert fresh.outbox(state="pending") == []
    assert {e.state for e in fresh.outbox()} == {"synced"}


HOSTILE = ["a/b", "q?x=1&y=2", "frag#ment", "..", " spaced  out ", "slash/and/../more/", "100%"]


def test_hostile_thread_ids_restore_exactly(
    machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """Thread ids with /, ?, #, .., spaces and % restore exactly (one path segment each)."""
    with on_plane(machine_a, plane):
        machine_a.put_many(
            [
                Checkpoint(
                    thread_id=thread, node_id=f"step-{n}", step=n, state={"id": thread, "n": n}
                )
                for thread in HOSTILE
                for n in range(2)
            ]
        )
    conn = link(fresh, plane)
    for thread in HOSTILE:
        latest = restore_from_plane(fresh, thread, conn)
        assert latest is not None
        assert latest.thread_id == thread
        assert [essence(c) for c in fresh.history(thread)] == [
            essence(c) for c in machine_a.history(thread)
        ]
    assert {r.thread_id for r in fresh.iter_threads()} == set(HOSTILE)


# ---------------------------------------------------------------------------- a plane without history


def test_a_latest_only_plane_restores_its_latest_row(
    failed_on_a: str, machine_a: Store, fresh: Store, plane: PlaneHandle
) -> None:
    """From a plane that serves only latest (404 on history, a real plane in that mode) the
    latest row is restored and the plan says so; a failed run restored that way cannot be
    resumed, exactly the fastaiagent SDK's limit."""
    plane.plane.history = False
    conn = link(fresh, plane)
    plan = plan_restore(fresh, failed_on_a, conn)
    assert plan.source == "latest"
    assert [c.node_id for c in plan.checkpoints] == ["run_end"]
    assert any("serves only the latest" in w and "cannot be resumed" in w for w in plan.warnings)
    apply_restore(fresh, plan)
    assert [essence(c) for c in fresh.history(failed_on_a)] == [
        essence(read_thread(machine_a, failed_on_a)[-1])
    ]
    with pytest.raises(RunNotResumable, match="failed before writing any step"):
        flaky.resume(fresh, failed_on_a, connection=conn)


def _sdk_item(execution_id: str, **fields: Any) -> dict[str, Any]:
    """An interrupted agent row exactly as the fastaiagent SDK sends it (no durability extension)."""
    item = {
        "checkpoint_id": f"{execution_id}-cp",
        "execution_id": execution_id,
        "resource_type": "agent",
        "agent_id": "helper",
        "chain_id": None,
        "node_id": "turn:1/tool:approve",
        "step_index": 1,
        "step_type": "hitl_pause",
        "status": "interrupted",
        "parent_checkpoint_id": None,
        "state_snapshot": {"messages": [], "turn": 1},
        "metadata": {
            "node_input": {},
            "node_output": {},
            "iteration": 0,
            "iteration_counters": {},
            "interrupt_reason": "needs approval",
            "interrupt_context": {"amount": 12},
            "agent_path": "agent:helper",
            "chain_name": "helper",
        },
        "created_at": (START - timedelta(days=1)).isoformat(),
        "sequence": 4,
    }
    item.update(fields)
    return item


def test_a_fastaiagent_park_takes_the_waiting_horizon(fresh: Store, plane: PlaneHandle) -> None:
    """An interrupted row the fastaiagent SDK sent to a latest-only plane (it carries no deadline)
    is restored with its park at the thread's waiting horizon (the pause + the waiting retention),
    and the plan says so."""
    needs_parks(fresh)
    plane.plane.history = False
    answer = httpx.post(
        plane.url + "/public/v1/checkpoints/ingest",
        content=orjson.dumps({"checkpoints": [_sdk_item("sdk-exec")]}),
        headers={"X-API-Key": plane.key, "Content-Type": "application/json"},
    )
    assert answer.status_code == 201
    assert answer.json()["ingested"] == 1
    plan = plan_restore(fresh, "sdk-exec", link(fresh, plane))
    assert plan.park is not None
    horizon = fresh.settings.waiting_retention
    assert plan.park.deadline == START - timedelta(days=1) + horizon
    assert plan.park.deadline_source == "horizon"
    assert any("carries no deadline" in w and "waiting horizon" in w for w in plan.warnings)
    assert plan.to_frame()["deadline_source"].tolist() == ["horizon"]
    apply_restore(fresh, plan)
    park = fresh.get_park("sdk-exec")
    assert park is not None
    assert (park.deadline_source, park.reason, park.context, park.runner) == (
        "horizon",
        "needs approval",
        {"amount": 12},
        "helper",
    )
    latest = fresh.latest("sdk-exec")
    assert latest is not None
    assert (latest.status, latest.agent_path, latest.state) == (
        "interrupted",
        "agent:helper",
        {"messages": [], "turn": 1},
    )


# ---------------------------------------------------------------------------- the command line


def test_cli_restore_plans_then_applies_and_never_prints_the_key(
    machine_a: Store, plane: PlaneHandle, tmp_path: Path
) -> None:
    """`durability restore URL THREAD --plane … --dry-run --json` prints the plan and writes nothing;
    without --dry-run it restores; a second run is refused (exit 1) unless --overwrite; the API key
    never appears in the output."""
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "cli"})
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {"DURABILITY_PLANE_API_KEY": plane.key}
    args = ["restore", url, parked.thread_id, "--plane", plane.url, "--single-worker"]
    runner = CliRunner()
    dry = runner.invoke(cli, [*args, "--dry-run", "--json"], env=env)
    assert dry.exit_code == 0, dry.output
    shown = json.loads(dry.output)
    assert shown["restored"] is None
    assert [r["node_id"] for r in shown["plan"]["checkpoints"]] == ["__start__", "draft", "approve"]
    assert shown["plan"]["park"]["deadline_source"] == "declared"
    with durability.open(url, settings=Settings()) as store:
        assert not store.has_thread(parked.thread_id)
    done = runner.invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    assert "restored 3 checkpoint(s)" in done.output
    assert "declared by the ask" in done.output
    again = runner.invoke(cli, args, env=env)
    assert again.exit_code == 1
    assert "--overwrite" in again.output
    replaced = runner.invoke(cli, [*args, "--overwrite", "--json"], env=env)
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(replaced.output)["restored"]["replaced"]["checkpoints"] == 3
    for result in (dry, done, again, replaced):
        assert plane.key not in result.output
    missing_key = runner.invoke(cli, args, env={"DURABILITY_PLANE_API_KEY": ""})
    assert missing_key.exit_code == 2
    assert "DURABILITY_PLANE_API_KEY" in missing_key.output


def test_cli_resume_restores_from_the_configured_plane(
    machine_a: Store, plane: PlaneHandle, tmp_path: Path
) -> None:
    """`durability resume` with a plane configured (env) restores a run the store never saw and
    completes it; with the switch off it fails as before (exit 2), the plane not asked."""
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "cli-resume"})
    url = f"sqlite:///{tmp_path / 'cli-resume.db'}"
    env = {
        "DURABILITY_PLANE_URL": plane.url,
        "DURABILITY_PLANE_API_KEY": plane.key,
        "DURABILITY_PROJECT": "",
    }
    args = ["resume", url, parked.thread_id, "--runner", "runner_defs:approval"]
    args += ["--value", '{"approved": true}', "--single-worker", "--json"]
    runner = CliRunner()
    reads = plane.faults.checkpoint_reads
    off = runner.invoke(cli, args, env={**env, ENV_RESTORE: "off"})
    assert off.exit_code == 2
    assert "restore from the plane is off" in off.output
    assert plane.faults.checkpoint_reads == reads
    done = runner.invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["status"] == "completed"
    assert plane.key not in done.output
    assert len(plane.ids_on_plane(parked.thread_id)) == 6, "the continuation replicated"


def test_cli_resume_with_a_project_replicates_the_resumed_run(
    machine_a: Store, plane: PlaneHandle, tmp_path: Path
) -> None:
    """`durability resume … --plane … --project shop` writes the resumed run's rows under project
    shop, so the command's connection drains them to the plane before it exits: nothing is left
    pending, and no warning is printed."""
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "cli-project"})
    url = f"sqlite:///{tmp_path / 'cli-project.db'}"
    args = ["resume", url, parked.thread_id, "--runner", "runner_defs:approval"]
    args += ["--value", '{"approved": true}', "--single-worker", "--plane", plane.url]
    done = CliRunner().invoke(
        cli, [*args, "--project", "shop", "--json"], env={"DURABILITY_PLANE_API_KEY": plane.key}
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["status"] == "completed"
    assert "warning" not in done.stderr
    assert len(plane.ids_on_plane(parked.thread_id)) == 6, "the continuation replicated"
    with durability.open(url, settings=Settings()) as store:
        rows = read_thread(store, parked.thread_id)
        assert [c.project_id for c in rows] == ["", "", "", "shop", "shop", "shop"]
        assert {e.state for e in store.outbox()} == {"synced"}
    status = CliRunner().invoke(cli, ["outbox", "status", url, "--json"])
    assert [(p["project_id"], p["pending"]) for p in json.loads(status.output)] == [
        ("", 0),
        ("shop", 0),
    ]


@pytest.mark.parametrize("fault", ["hold", 503])
def test_cli_resume_warns_when_the_run_is_not_on_the_plane_at_exit(
    machine_a: Store, plane: PlaneHandle, tmp_path: Path, fault: str | int
) -> None:
    """When the final drain times out (the plane holds the request past --drain-timeout) or the
    plane will not take the rows (503s), `durability resume` still succeeds but warns that the
    run's rows are pending and how to see them."""
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "cli-warn"})
    url = f"sqlite:///{tmp_path / 'cli-warn.db'}"
    plane.faults.faults.extend([fault] * 50)
    args = ["resume", url, parked.thread_id, "--runner", "runner_defs:approval"]
    args += ["--value", '{"approved": true}', "--single-worker", "--plane", plane.url]
    done = CliRunner().invoke(
        cli, [*args, "--drain-timeout", "0.5"], env={"DURABILITY_PLANE_API_KEY": plane.key}
    )
    with durability.open(url, settings=Settings()) as store:
        pending = store.outbox(state="pending")
    plane.faults.release.set()
    assert done.exit_code == 0, done.output
    assert "completed" in done.stdout
    assert len(pending) == 3
    why = "did not finish within 0.5s" if fault == "hold" else "did not take them (HTTP 503"
    assert f"warning: 3 checkpoint(s) of thread {parked.thread_id} are still pending" in done.stderr
    assert why in done.stderr
    assert f"durability outbox status {url}" in done.stderr


def test_cli_restore_dry_run_exits_1_when_the_restore_would_be_refused(
    machine_a: Store, plane: PlaneHandle, tmp_path: Path
) -> None:
    """`durability restore --dry-run` exits 1 with the refusal when applying would be refused (a
    park the store cannot hold; a thread the store already holds, without --overwrite), and 0
    when it would not; it never writes."""
    with on_plane(machine_a, plane):
        parked = runner_defs.approval.start(machine_a, {"topic": "dry-refused"})
    url = f"sqlite:///{tmp_path / 'dry.db'}"
    env = {"DURABILITY_PLANE_API_KEY": plane.key}
    args = ["restore", url, parked.thread_id, "--plane", plane.url]
    runner = CliRunner()
    no_park = runner.invoke(cli, [*args, "--dry-run"], env=env)
    assert no_park.exit_code == 1, no_park.output
    assert "dry run: would not restore: " in no_park.stderr
    assert "single_worker=True" in no_park.stderr
    as_json = runner.invoke(cli, [*args, "--dry-run", "--json"], env=env)
    assert as_json.exit_code == 1
    assert "single_worker=True" in json.loads(as_json.stdout)["error"]
    with durability.open(url, settings=Settings()) as store:
        assert not store.has_thread(parked.thread_id)
    parks = [*args, "--single-worker"]
    assert runner.invoke(cli, [*parks, "--dry-run"], env=env).exit_code == 0
    assert runner.invoke(cli, parks, env=env).exit_code == 0
    held = runner.invoke(cli, [*parks, "--dry-run"], env=env)
    assert held.exit_code == 1
    assert "already holds thread" in held.stderr
    assert "--overwrite" in held.stderr
    assert runner.invoke(cli, [*parks, "--dry-run", "--overwrite"], env=env).exit_code == 0


def test_resume_and_fork_keep_the_runs_project_else_take_the_connections(
    machine_a: Store, plane: PlaneHandle
) -> None:
    """A resumed or forked run writes under the source run's project; a run started without one
    takes the project of the connection it is resumed through; project_id= overrides both."""
    BROKEN["b"] = True
    try:
        shop = flaky.start(machine_a, {"machine": "A"}, project_id="shop")
        plain = flaky.start(machine_a, {"machine": "A"})
    finally:
        BROKEN["b"] = False
    with connect(machine_a, plane.url, plane.key, project_id="ops", background=False) as conn:
        flaky.resume(machine_a, shop.thread_id, connection=conn)
        flaky.resume(machine_a, plain.thread_id, connection=conn)
        kept = flaky.fork(machine_a, shop.thread_id, connection=conn)
        chosen = flaky.fork(machine_a, plain.thread_id, project_id="lab")

    def projects(thread_id: str) -> list[str]:
        return [c.project_id for c in read_thread(machine_a, thread_id)]

    assert projects(shop.thread_id) == ["shop"] * 6
    assert projects(plain.thread_id) == ["", "", "", "ops", "ops", "ops"]
    assert set(projects(kept.thread_id)) == {"shop"}
    assert set(projects(chosen.thread_id)) == {"lab"}
