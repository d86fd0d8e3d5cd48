"""The demo fleet is written by the runner, replicated to a real plane, and one of its stores is
lost and restored: every kind of run and outbox state the bundle explains is in it."""

from __future__ import annotations

import itertools
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
    DEMO_DAYS,
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
    assert len(fleet.lost_threads) == 4
    assert set(fleet.lost_threads) | {fleet.restored_thread} <= on_plane
    assert manifest["lost_threads"] == fleet.lost_threads
    assert "key" not in json.dumps(manifest).replace("key_env", "")


def test_demo_command_reports_runs(tmp_path: Path) -> None:
    """`durability demo --no-notebooks --json` builds the fleet and counts runs and outbox rows;
    its progress goes to stderr, never into the JSON."""
    args = ["--days", str(DEMO_DAYS), "--threads", "30"]  # a small fleet: CI stays fast
    result = CliRunner().invoke(
        cli, ["demo", "--out", str(tmp_path), "--no-notebooks", "--json", *args]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "conversation turns" in result.stderr, "progress, on stderr"
    assert data["parks"] == 5
    assert set(data["runs"]) == {"completed", "failed", "parked"}, "a turn is a completed run"
    assert data["threads"] > 30
    assert data["outbox"]["quarantined"] >= 3 * len(INGESTS)
    assert data["outbox"]["pending"] > 0
    assert len(data["lost_threads"]) == 4
    assert data["notebooks"] == []


def test_report_writes_the_charts_and_tables_as_a_static_page(
    replicated_demo: str, tmp_path: Path
) -> None:
    """`durability report URL --out DIR`: index.html with the sections (failed runs by reason,
    how to release quarantined rows, a simulated plane outage), every chart a PNG beside it."""
    out = tmp_path / "report"
    outage = ["--outage-length", "3d", "--drain-rate", "0.01"]
    result = CliRunner().invoke(
        cli, ["report", replicated_demo, "--out", str(out), "--now", END.isoformat(), *outage]
    )
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    for title in (
        "Threads",
        "Runs",
        "Replication",
        "Retention",
        "Where the bytes are",
        "Restore readiness",
        "Growth forecast",
        "Retention backtest",
    ):
        assert f"<h2>{title}</h2>" in page
    assert "plane rejected: state_snapshot is" in page, (
        "the quarantined rows with the plane's reason"
    )
    assert "failed runs by reason" in page
    assert '\\"cancelled\\"' in page, "a cell of the failed-runs table (its JSON data)"
    assert "durability outbox release" in page
    assert "a 3d outage from " in page
    images = sorted(p.name for p in out.glob("*.png"))
    assert images == sorted(
        f"{n}.png"
        for n in (
            "run_health",
            "backlog",
            "outage_backlog",
            "retention_curve",
            "idle_gaps",
            "sweep_timeline",
            "where_bytes",
            "readiness",
            "forecast",
            "backtest",
        )
    )
    for name in images:
        assert f'src="{name}"' in page


def test_lab_copies_carry_the_demo_parameters_and_leave_the_committed_notebooks_stripped(
    tmp_path: Path,
) -> None:
    """The copies `durability lab` opens point at the demo store and plane; no key is written."""
    from durability import bundle
    from durability.demo import notebook_parameters

    manifest = {"store_url": "sqlite:///x/demo.db", "edge_url": "sqlite:///x/edge.db"}
    params = notebook_parameters(manifest, "http://127.0.0.1:1", tmp_path / "charts")
    before = {p.name: p.read_text() for p in bundle.NOTEBOOKS.glob("*.ipynb")}
    written = bundle.write_copies(tmp_path / "lab", params)
    assert [p.name for p in written] == list(bundle.NOTEBOOK_NAMES)
    explore = (tmp_path / "lab" / "explore_store.ipynb").read_text()
    assert "sqlite:///x/demo.db" in explore
    assert "http://127.0.0.1:1" in explore
    assert "injected-parameters" in explore
    restore_nb = (tmp_path / "lab" / "restore_runs.ipynb").read_text()
    assert "sqlite:///x/edge.db" in restore_nb
    assert "DURABILITY_EDGE_PLANE_API_KEY" in restore_nb
    assert {p.name: p.read_text() for p in bundle.NOTEBOOKS.glob("*.ipynb")} == before


def test_lab_without_a_demo_or_store_says_what_to_do(tmp_path: Path) -> None:
    """No demo in OUT and no --store: refused, naming `durability demo` and --store."""
    result = CliRunner().invoke(cli, ["lab", "--out", str(tmp_path), "--no-browser"])
    assert result.exit_code != 0
    assert "durability demo" in result.output
    assert "--store" in result.output


def test_python_dash_m_durability_is_the_command_line() -> None:
    """`python -m durability --help` lists the bundle's commands."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "durability", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    for command in ("demo", "lab", "report"):
        assert f"  {command} " in out, out


def test_background_traffic_has_the_shapes_of_a_real_fleet() -> None:
    """Weekdays busier than weekends, a few burst days, heavy-tailed sizes with multi-MiB
    attachments, idle gaps from under an hour to weeks; written in time order with owners
    and finished marks."""
    import statistics

    from durability.clock import FrozenClock
    from durability.demo.traffic import ATTACHMENTS, OWNER, Traffic

    start = datetime(2026, 9, 7, tzinfo=UTC)  # a Monday
    traffic = Traffic(start, 56, 400)
    firsts = [t.at for t in traffic.turns if t.index == 0]
    weekday = sum(d.weekday() < 5 for d in firsts) / 5
    weekend = sum(d.weekday() >= 5 for d in firsts) / 2
    assert weekday > 1.8 * weekend, (weekday, weekend)
    grows = sorted({(t.thread, t.grow) for t in traffic.turns})
    sizes = [g for _, g in grows]
    assert max(sizes) > 10 * statistics.median(sizes), "heavy-tailed growth"
    assert sum(t.attachment for t in traffic.turns) == ATTACHMENTS
    by_thread: dict[int, list[datetime]] = {}
    for t in traffic.turns:
        by_thread.setdefault(t.thread, []).append(t.at)
    gaps = [b - a for times in by_thread.values() for a, b in itertools.pairwise(times)]
    assert min(gaps) < timedelta(hours=1)
    assert max(gaps) > timedelta(days=14)
    clock = FrozenClock(start)
    with durability.open("memory://traffic", clock=clock) as store:
        half = start + timedelta(days=28)
        clock.set(half)
        written = traffic.write_until(store, half)
        assert written == 2 * sum(t.at <= half for t in traffic.turns), "a reply and a run end"
        clock.set(start + timedelta(days=60))
        assert written + traffic.write_until(store, clock()) == 2 * len(traffic.turns)
        records = list(store.iter_threads())
        assert len(records) == len(by_thread)
        assert {r.owner for r in records} == {OWNER}
        assert sum(r.finished_at is not None for r in records) == len(traffic.finished)
        largest = max(r.size_bytes for r in records)
        assert largest > 3 * 1024 * 1024, "an attachment makes a multi-MiB checkpoint"
