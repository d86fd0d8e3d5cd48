"""The demo fleet is written by the runner and holds every kind of run the bundle explains."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

import durability
from durability.cli import cli
from durability.clock import FrozenClock
from durability.demo import DEMO_START, build_demo
from durability.runs import list_runs
from durability.settings import Settings


def test_demo_fleet_has_every_kind_of_run(tmp_path: Path) -> None:
    """Completed, failed (error, cancelled, aborted) and parked runs; unmarked conversations; flows owning marked threads."""
    clock = FrozenClock(DEMO_START)
    with durability.open(
        f"sqlite:///{tmp_path / 'demo.db'}", settings=Settings(), clock=clock, single_worker=True
    ) as store:
        build_demo(store, clock)
        runs = list_runs(store)
        records = {r.thread_id: r for r in store.iter_threads()}
    statuses = Counter((r.runner, r.status, r.reason) for r in runs)
    assert statuses[("publish", "completed", None)] >= 4
    assert statuses[("publish", "parked", None)] == 2
    for reason in ("error", "cancelled", "aborted"):
        assert statuses[("publish", "failed", reason)] >= 1, reason
    conversations = [r for t, r in records.items() if t.startswith("conversation-")]
    assert len(conversations) == 3
    assert all(not r.finished for r in conversations), "a conversation is never marked"
    assert all(r.checkpoints == 12 for r in conversations), "four turns each"
    sessions = [r for t, r in records.items() if t.startswith("support-session-")]
    assert all(r.finished and r.declared_finished is not None for r in sessions)
    triage = [r for t, r in records.items() if t.endswith("-triage")]
    assert len(triage) == 3
    assert all(r.finished and r.owner == "flow:support" for r in triage)
    parked = [r for r in runs if r.status == "parked"]
    assert all(not records[r.thread_id].finished for r in parked), "a park is never a terminal"


def test_demo_command_reports_runs(tmp_path: Path) -> None:
    """`durability demo --json` builds the store and counts its runs by status."""
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["parks"] == 2
    assert set(data["runs"]) == {"completed", "failed", "parked"}
