"""Seed 004 "What a per-run provider means": a run given its own store keeps its thread there.

What the stores can show: where a run's marks land, what the deployment's ledger knows of a
thread whose checkpoints live elsewhere, how a per-run Redis thread leaves (its key TTL) and
how a per-run memory thread leaves (with its process). The sweep adds its own assertions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import PROVIDERS, make_target

from durability import Checkpoint
from durability.settings import Settings
from durability.stores import Store
from durability.testing import StoreTarget

FAR = timedelta(days=400)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Store]:
    """The deployment's configured store (the embedded SQLite default)."""
    from durability.stores import open_store

    with open_store(f"sqlite:///{tmp_path / 'deployment.db'}", settings=Settings()) as store:
        yield store


@pytest.fixture(params=PROVIDERS)
def per_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """The store one run was given for itself (``durability.open(other_url)``)."""
    run_dir = tmp_path / "per-run"
    run_dir.mkdir()
    yield from make_target(request.param, run_dir)


def test_a_runs_marks_land_in_the_ledger_of_the_store_it_ran_on(
    deployment: Store, per_run: StoreTarget
) -> None:
    """A run on its own store records its start and finished mark there; the deployment's ledger has nothing."""
    with per_run.open() as own:
        own.record_run_start("agent-thread", run_id="run-1", owner="agent:helper")
        own.put(Checkpoint(thread_id="agent-thread", run_id="run-1", state={"done": True}))
        marked = own.mark_finished("agent-thread")
        assert marked.finished
        assert [r.thread_id for r in own.finished_due(own.clock() + FAR)] == ["agent-thread"]
    assert deployment.thread("agent-thread") is None
    assert deployment.finished_due(deployment.clock() + FAR) == []
    # A deployment whose configured provider IS that store finds the mark (and so sweeps it),
    # unless the store lives only in the run's process (memory) or expires it itself (redis).
    with per_run.open() as same_store:
        found = [r.thread_id for r in same_store.finished_due(same_store.clock() + FAR)]
        assert found == ["agent-thread"]
        assert same_store.capabilities.sweeps_waiting == (
            same_store.provider in ("sqlite", "postgres")
        )
        assert same_store.capabilities.ttl == (same_store.provider == "redis")


def test_a_flow_marks_its_agents_thread_in_the_deployment_ledger_where_delete_finds_nothing(
    deployment: Store, per_run: StoreTarget
) -> None:
    """The flow marks the owned thread in the deployment's ledger; deleting there removes no checkpoint, the run's store keeps them."""
    with per_run.open() as own:
        own.put(Checkpoint(thread_id="flow-run-7/agent", state={"n": 1}))
        deployment.record_run_start("flow-run-7/agent", run_id="flow-run-7", owner="flow:f")
        assert deployment.mark_finished("flow-run-7/agent").finished
        assert [r.thread_id for r in deployment.finished_due(deployment.clock() + FAR)] == [
            "flow-run-7/agent"
        ]
        deleted = deployment.delete_thread("flow-run-7/agent")
        assert (deleted.checkpoints, deleted.writes) == (0, 0)
        assert deployment.thread("flow-run-7/agent") is None
        assert own.has_thread("flow-run-7/agent"), "it leaves on its own store's waiting horizon"
        record = own.thread("flow-run-7/agent")
        assert record is not None
        assert not record.finished


def test_a_thread_on_a_per_run_redis_store_leaves_on_its_key_ttl_marked_or_not(
    tmp_path: Path,
) -> None:
    """With a 1 s waiting retention both a marked and an unmarked thread expire, nobody sweeping."""
    for target in make_target("redis", tmp_path):
        settings = Settings(waiting_retention=timedelta(seconds=1))
        with target.open(settings=settings) as own:
            for thread_id in ("marked", "unmarked"):
                own.record_run_start(thread_id, run_id="r", owner="agent")
                own.put(Checkpoint(thread_id=thread_id))
            own.mark_finished("marked")
            assert {r.thread_id for r in own.iter_threads()} == {"marked", "unmarked"}
            deadline = time.monotonic() + 5
            while (
                own.has_thread("marked") or own.has_thread("unmarked")
            ) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not own.has_thread("marked")
            assert not own.has_thread("unmarked")
            assert list(own.iter_threads()) == []
            assert own.finished_due(own.clock() + FAR) == []


WRITE_IN_MEMORY = """
import sys
import durability
from durability import Checkpoint
from durability.settings import Settings
store = durability.open(sys.argv[1], settings=Settings())
before = [r.thread_id for r in store.iter_threads()]
store.record_run_start("mem-thread", run_id="r", owner="agent")
store.put(Checkpoint(thread_id="mem-thread"))
store.mark_finished("mem-thread")
again = durability.open(sys.argv[1], settings=Settings())
print(before, [r.thread_id for r in again.iter_threads()])
"""


def test_a_thread_on_a_per_run_memory_store_dies_with_its_process() -> None:
    """A named memory store is shared inside one process; the next process starts empty."""
    url = "memory://per-run-memory-test"
    runs = [
        subprocess.run(
            [sys.executable, "-c", WRITE_IN_MEMORY, url], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs == ["[] ['mem-thread']", "[] ['mem-thread']"], runs
    from durability.stores import open_store

    with open_store(url, settings=Settings()) as here:
        assert list(here.iter_threads()) == []
