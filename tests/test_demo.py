"""The demo fleet is written by the runner, replicated to a real plane, and one of its stores is
lost and restored: every kind of run and outbox state the bundle explains is in it."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

import durability
from durability.cli import cli
from durability.clock import FrozenClock
from durability.demo import (
    CONVERSATIONS,
    DEMO_START,
    DEMO_STATE_CAP,
    INGESTS,
    SUPPORT_SESSIONS,
    build_demo,
    build_fleet,
)
from durability.plane import PlaneStorage
from durability.runs import list_runs
from durability.settings import Settings

END = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_demo_fleet_has_every_kind_of_run(tmp_path: Path) -> None:
    """Completed, failed (error, cancelled, aborted) and parked runs; unmarked conversations; flows owning marked threads."""
    clock = FrozenClock(DEMO_START)
    with durability.open(
        f"sqlite:///{tmp_path / 'demo.db'}", settings=Settings(), clock=clock, single_worker=True
    ) as store:
        build_demo(store, clock)
        runs = list_runs(store)
        records = {r.thread_id: r for r in store.iter_threads()}
        history = [cp.created_at for r in records for cp in store.history(r)]
    statuses = Counter((r.runner, r.status, r.reason) for r in runs)
    assert statuses[("publish", "completed", None)] >= 10
    assert statuses[("publish", "parked", None)] == 5
    for reason in ("error", "cancelled", "aborted"):
        assert statuses[("publish", "failed", reason)] >= 1, reason
    assert statuses[("ingest", "completed", None)] == len(INGESTS)
    conversations = {t: r for t, r in records.items() if t.startswith("conversation-")}
    assert len(conversations) == len(CONVERSATIONS)
    assert all(not r.finished for r in conversations.values()), "a conversation is never marked"
    for n, turns in enumerate(CONVERSATIONS):
        assert conversations[f"conversation-{n}"].checkpoints == 3 * len(turns)
    sessions = [r for t, r in records.items() if t.startswith("support-session-")]
    assert len(sessions) == len(SUPPORT_SESSIONS)
    assert all(r.finished and r.declared_finished is not None for r in sessions)
    triage = [r for t, r in records.items() if t.endswith("-triage")]
    assert len(triage) == sum(restarts + 1 for _, restarts in SUPPORT_SESSIONS)
    assert all(r.finished and r.owner == "flow:support" for r in triage)
    parked = [r for r in runs if r.status == "parked"]
    assert all(not records[r.thread_id].finished for r in parked), "a park is never a terminal"
    span = max(history) - min(history)
    assert timedelta(days=40) < span < timedelta(days=43), "the fleet spreads over six weeks"


def test_fleet_replicates_quarantines_and_restores(tmp_path: Path) -> None:
    """The plane refused the oversized rows (quarantined with its reason), the rows after the last
    drain are pending, the rest synced; the lost edge store got its failed run back, resumed."""
    with build_fleet(tmp_path, end=END) as fleet:
        manifest = json.loads((tmp_path / "demo.json").read_text())
        with durability.open(fleet.store_url) as store:
            quarantined = store.outbox(state="quarantined")
            pending = store.outbox(state="pending")
            synced = store.outbox(state="synced")
            assert store.replicates, "the store records that it replicates"
        with durability.open(fleet.edge_url, single_worker=True) as edge:
            edge_runs = list_runs(edge)
        storage = PlaneStorage(fleet.plane.db_url)
        try:
            tenant = storage.authenticate(fleet.plane.keys["edge"])
            assert tenant is not None
            on_plane = {r["execution_id"] for r in storage.runs(tenant, limit=100, cursor=None)[0]}
        finally:
            storage.close()
    assert len(quarantined) == 3 * len(INGESTS)
    for entry in quarantined:
        reason = entry.sync_error or ""
        assert reason.startswith("plane rejected: state_snapshot is "), reason
        assert reason.endswith(f"over the {DEMO_STATE_CAP}-byte cap"), reason
    assert pending
    assert all(e.created_at > END - timedelta(hours=12) for e in pending)
    assert len(synced) > 200
    assert any(e.attempts > 1 for e in synced), "rows written during the maintenance were retried"
    assert [(r.thread_id, r.status) for r in edge_runs] == [
        (fleet.restored_thread, "completed")
    ] * len(edge_runs)
    assert len(fleet.lost_threads) == 3
    assert set(fleet.lost_threads) | {fleet.restored_thread} <= on_plane
    assert manifest["lost_threads"] == fleet.lost_threads
    assert "key" not in json.dumps(manifest).replace("key_env", "")


def test_demo_command_reports_runs(tmp_path: Path) -> None:
    """`durability demo --no-notebooks --json` builds the fleet and counts runs and outbox rows."""
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path), "--no-notebooks", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["parks"] == 5
    assert set(data["runs"]) == {"completed", "failed", "parked"}
    assert data["outbox"]["quarantined"] == 3 * len(INGESTS)
    assert data["outbox"]["pending"] > 0
    assert len(data["lost_threads"]) == 3
    assert data["notebooks"] == []
