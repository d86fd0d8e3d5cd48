"""A store once connected keeps replicating after a clean disconnect (an un-acked
checkpoint is never dropped for being old; rows written while not connected replicate at the
next connect): the sweep and `durability threads delete` keep what the plane lacks, `outbox
status` says the project is disconnected, and only `durability outbox forget` gives a plane up.

Every test runs on SQLite, Postgres and Redis against a real plane on loopback, or against a
plane that is down (nothing listens on its port); the store's clock is the only thing faked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result
from conftest import make_target
from plane_support import PlaneHandle

from durability import Checkpoint
from durability.cli import cli
from durability.clock import FrozenClock
from durability.replication import connect, outbox_status
from durability.settings import Settings
from durability.stores import Store
from durability.sweep import plan_sweep, sweep
from durability.testing import StoreTarget

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = Settings(waiting_retention="30d", finished_retention="7d")


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def rtarget(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """A fresh location on every provider that keeps an outbox."""
    yield from make_target(request.param, tmp_path)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(T0)


@pytest.fixture
def store(rtarget: StoreTarget, clock: FrozenClock) -> Iterator[Store]:
    with rtarget.open(clock=clock, settings=SETTINGS) as opened:
        yield opened


def write(store: Store, thread_id: str, checkpoints: int, *, finish: bool = True) -> None:
    """A run writes ``checkpoints`` rows on ``thread_id`` and, by default, marks it finished."""
    store.record_run_start(thread_id, run_id=f"run-{thread_id}", owner="test")
    for n in range(checkpoints):
        store.put(Checkpoint(thread_id=thread_id, node_id=f"step-{n}", state={"n": n}))
    if finish:
        store.mark_finished(thread_id)


def connect_and_disconnect(store: Store, target: str, api_key: str = "dpk_unused") -> None:
    """A process connects the store, drains once and disconnects cleanly."""
    with httpx.Client(timeout=1.0) as http:
        connect(store, target, api_key, http=http, background=False).close(timeout=5)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


# ---------------------------------------------------------------------------- the sweep


def test_after_a_disconnect_the_sweep_spares_the_threads_the_plane_lacks(
    store: Store, clock: FrozenClock, down_plane: str
) -> None:
    """Connected to a plane that is down, then disconnected: the store still replicates, so the
    replication filter spares the unsent thread (plan and sweep agree) and the sent one goes."""
    write(store, "unsent", 3)
    write(store, "sent", 1)
    store.mark_synced((e.thread_id, e.seq) for e in store.outbox(thread_id="sent"))
    connect_and_disconnect(store, down_plane)
    assert store.replicates
    [record] = store.connections()
    assert (record.target, record.open) == (down_plane, False)
    clock.advance(8 * DAY)
    plan = {r.thread_id: r for r in plan_sweep(store).rows}
    assert (plan["unsent"].action, plan["unsent"].owner) == ("spared", "replication")
    assert "the plane does not have 3 of its checkpoints" in plan["unsent"].reason
    assert plan["sent"].action == "delete"
    result = sweep(store)
    assert result.deleted_ids() == ["sent"]
    assert [s.thread_id for s in result.spared["finished"]] == ["unsent"]
    assert len(store.history("unsent")) == 3


def test_rows_written_after_a_disconnect_are_sent_at_the_next_connect(
    store: Store, plane: PlaneHandle
) -> None:
    """The drain sends what the previous connection left, and what was written while disconnected."""
    write(store, "before", 1, finish=False)
    connect_and_disconnect(store, plane.url, plane.key)
    write(store, "meanwhile", 2, finish=False)
    assert [s.connection for s in outbox_status(store)] == ["disconnected"]
    assert [e.state for e in store.outbox(thread_id="meanwhile")] == ["pending", "pending"]
    connect_and_disconnect(store, plane.url, plane.key)
    assert {e.state for e in store.outbox()} == {"synced"}
    assert len(plane.ids_on_plane("meanwhile")) == 2


# ---------------------------------------------------------------------------- threads delete


def test_threads_delete_refuses_after_a_disconnect_unless_forced(
    rtarget: StoreTarget, store: Store, down_plane: str
) -> None:
    """Never connected, the store does not replicate and pending rows do not refuse. Once it was
    connected they do: the refusal names the thread, how many rows the plane lacks and --force;
    --force deletes."""
    write(store, "local", 2, finish=False)
    write(store, "unsent", 3, finish=False)
    local = invoke("threads", "delete", rtarget.url, "local", "--yes")
    assert local.exit_code == 0, local.output
    assert store.thread("local") is None
    connect_and_disconnect(store, down_plane)
    refused = invoke("threads", "delete", rtarget.url, "unsent", "--yes")
    assert refused.exit_code == 1
    assert "refusing to delete thread 'unsent'" in refused.output
    assert "3 pending, 0 quarantined" in refused.output
    assert "--force" in refused.output
    assert len(store.history("unsent")) == 3
    forced = invoke("threads", "delete", rtarget.url, "unsent", "--yes", "--force", "--json")
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.output) == {"thread_id": "unsent", "checkpoints": 3, "writes": 0}
    assert store.thread("unsent") is None
    assert store.outbox(thread_id="unsent") == []


def test_threads_delete_deletes_a_thread_the_plane_has(
    rtarget: StoreTarget, store: Store, plane: PlaneHandle
) -> None:
    """Every row synced: the thread goes without --force, after confirmation (or --yes)."""
    write(store, "sent", 2, finish=False)
    connect_and_disconnect(store, plane.url, plane.key)
    assert store.replicates
    declined = CliRunner().invoke(cli, ["threads", "delete", rtarget.url, "sent"], input="n\n")
    assert declined.exit_code == 1
    assert "Aborted" in declined.output
    assert store.has_thread("sent")
    deleted = CliRunner().invoke(cli, ["threads", "delete", rtarget.url, "sent"], input="y\n")
    assert deleted.exit_code == 0, deleted.output
    assert "deleted thread sent: 2 checkpoints, 0 pending writes" in deleted.output
    assert store.thread("sent") is None
    missing = invoke("threads", "delete", rtarget.url, "sent", "--yes")
    assert missing.exit_code == 1
    assert "no thread 'sent'" in missing.output


# ---------------------------------------------------------------------------- outbox status and forget


def test_outbox_status_shows_a_disconnected_project_and_what_keeps_its_rows(
    rtarget: StoreTarget, store: Store, down_plane: str
) -> None:
    """JSON: connection "disconnected" with its time; the table says so and how to give the plane up."""
    write(store, "unsent", 3, finish=False)
    connect_and_disconnect(store, down_plane)
    shown = invoke("outbox", "status", rtarget.url, "--json")
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.output)
    assert (row["pending"], row["connected_to"], row["connection"]) == (
        3,
        down_plane,
        "disconnected",
    )
    assert row["disconnected_at"] == T0.isoformat()
    table = invoke("outbox", "status", rtarget.url)
    assert "disconnected 2026-03-01" in table.output
    assert "durability outbox forget" in table.output


def test_outbox_forget_refuses_while_rows_are_pending_unless_forced(
    rtarget: StoreTarget, store: Store, clock: FrozenClock, down_plane: str
) -> None:
    """Forgetting an abandoned plane: refused with the count and --force; forced, the store no longer
    replicates and the sweep deletes the rows the plane never got."""
    write(store, "unsent", 2)
    connect_and_disconnect(store, down_plane)
    unknown = invoke("outbox", "forget", rtarget.url, "--project", "nobody")
    assert unknown.exit_code == 1
    assert "no connection of project 'nobody'" in unknown.output
    refused = invoke("outbox", "forget", rtarget.url)
    assert refused.exit_code == 1
    assert "2 of its checkpoints yet (2 pending, 0 quarantined)" in refused.output
    assert "--force" in refused.output
    assert store.replicates
    forced = invoke("outbox", "forget", rtarget.url, "--force")
    assert forced.exit_code == 0, forced.output
    assert "the store no longer replicates" in forced.output
    assert "2 unsent rows" in forced.output
    assert store.connections() == []
    assert not store.replicates
    clock.advance(8 * DAY)
    assert sweep(store).deleted_ids() == ["unsent"]


def test_outbox_forget_of_a_drained_project_needs_no_force(
    rtarget: StoreTarget, store: Store, plane: PlaneHandle
) -> None:
    """Nothing unsent: forgotten at once; other projects' records keep the store replicating."""
    store.put(Checkpoint(thread_id="t", project_id="old"))
    with httpx.Client(timeout=5) as http:
        connect(store, plane.url, plane.key, project_id="old", http=http, background=False).close()
    store.record_connection("other", plane.url)
    forgot = invoke("outbox", "forget", rtarget.url, "--project", "old", "--json")
    assert forgot.exit_code == 0, forgot.output
    assert json.loads(forgot.output) == {
        "project_id": "old",
        "target": plane.url,
        "unsent": 0,
        "replicates": True,
    }
    assert [c.project_id for c in store.connections()] == ["other"]
    live = invoke("outbox", "forget", rtarget.url, "--project", "other")
    assert live.exit_code == 0, live.output
    assert "the record says project 'other' has been connected" in live.stderr
    assert "no longer replicates" in live.stdout
    assert "--force" in invoke("outbox", "forget", "--help").output
