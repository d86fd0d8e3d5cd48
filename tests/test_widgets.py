"""durability.widgets in plain pytest: set a control's value or click a button, see the view change.

The stores are real SQLite stores written by the runner (the demo fleet, tests/runner_defs.py),
the plane is the project's own on loopback (tests/plane_support.py). Outside a kernel an
``Output`` widget captures nothing, so the tests read what each view computed (its frame,
summary, figure) and the store itself.
"""

from __future__ import annotations

import html
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import runner_defs
from conftest import REPLICATED_DEMO_END
from plane_support import PlaneHandle, fast_backoff

import durability
from durability import Checkpoint, frames, plots
from durability.clock import FrozenClock
from durability.demo import DEMO_START, build_demo
from durability.humanize import format_bytes
from durability.replication import Connection, connect, disconnect
from durability.runs import read_thread
from durability.settings import Settings
from durability.stores.base import Store
from durability.widgets import (
    PICKER_PAGE,
    OutboxMonitor,
    RestorePanel,
    RetentionPlanner,
    RowPicker,
    StoreExplorer,
)

LATER = DEMO_START + timedelta(days=20)


def sqlite_store(path: Path, clock: FrozenClock) -> Store:
    return durability.open(
        f"sqlite:///{path}", settings=Settings(), single_worker=True, clock=clock
    )


@pytest.fixture(scope="module")
def demo_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo fleet written once by the runner (the widget tests only read it, but one)."""
    path = tmp_path_factory.mktemp("widgets") / "demo.db"
    clock = FrozenClock(DEMO_START)
    with sqlite_store(path, clock) as store:
        build_demo(store, clock, days=12)
    return path


@pytest.fixture
def demo(demo_path: Path) -> Iterator[Store]:
    with sqlite_store(demo_path, FrozenClock(LATER)) as store:
        yield store


def css(widget: object) -> list[str]:
    return list(widget._dom_classes)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- retention planner


def test_planner_moves_with_the_waiting_slider(demo: Store) -> None:
    """A shorter waiting value deletes the idle conversations too: the plan, the summary and
    the chart follow the slider; the store is never touched."""
    before = frames.threads(demo)
    planner = RetentionPlanner(demo, now=LATER)
    assert css(planner.waiting) == ["durability-retention-waiting"]
    assert planner.waiting.value == 30
    assert set(planner.deletes["horizon"]) == {"finished"}
    first_summary, first_figure = planner.summary.value, planner.figure
    finished_deletes = len(planner.deletes)
    assert f"would delete <b>{finished_deletes}</b>" in first_summary

    planner.waiting.value = 5
    waiting_rows = planner.deletes[planner.deletes["horizon"] == "waiting"]
    assert {f"conversation-{n}" for n in range(3)} <= set(waiting_rows["thread_id"])
    assert len(planner.deletes) > finished_deletes
    assert planner.summary.value != first_summary
    assert f"would delete <b>{len(planner.deletes)}</b>" in planner.summary.value
    assert planner.figure is not first_figure
    assert planner.figure is not None
    assert "waiting 5d" in planner.figure.axes[1].get_title()
    assert set(planner.daily["policy"]) == {
        "waiting 5d / finished 7d",
        "waiting 30d / finished 7d",
    }
    assert frames.threads(demo).equals(before), "planning deletes nothing"


def test_planner_now_and_finished_controls(demo: Store) -> None:
    """An earlier "now" finds fewer marks due; the finished slider moves the simulation (which
    applies it to every mark) while the plan keeps each mark's recorded due time."""
    planner = RetentionPlanner(demo, now=LATER)
    late = len(planner.deletes)
    planner.now.value = (DEMO_START + timedelta(days=2)).date()
    assert planner.when == datetime.combine(
        (DEMO_START + timedelta(days=2)).date(), LATER.timetz()
    ).astimezone(UTC)
    assert len(planner.deletes) < late
    assert planner.plan is not None
    assert planner.plan.now == planner.when

    plan_rows = planner.frame[["thread_id", "action"]].copy()
    simulated = planner.daily["deleted_finished_threads"].tolist()
    planner.finished.value = 1
    assert planner.frame[["thread_id", "action"]].equals(plan_rows)
    assert planner.daily["deleted_finished_threads"].tolist() != simulated
    assert planner.plan.settings.finished_retention == timedelta(days=1)


def test_on_a_replicated_fleet_the_planner_chart_and_curve_agree_with_the_plan(
    replicated_demo: str,
) -> None:
    """On the demo replicated to its plane (threads holding rows the plane lacks are spared),
    the planner's first simulated day, its summary and the retention curve's point at the
    waiting value all say what plan_sweep says, before and after the slider moves."""
    with durability.open(replicated_demo) as store:
        planner = RetentionPlanner(store, Settings(), REPLICATED_DEMO_END)
        for waiting in (30, 7):
            planner.waiting.value = waiting
            assert planner.plan is not None
            total = planner.plan.summary()["total_delete"]
            spared = planner.frame[planner.frame["owner"] == "replication"]
            assert len(spared), "the plan spares threads the plane lacks rows of"
            first = planner.daily[planner.daily["policy"] == planner.policy.label].iloc[0]
            assert (first["deleted_threads"], first["deleted_bytes"]) == (
                total["threads"],
                total["size_bytes"],
            )
            assert f"would delete <b>{total['threads']:,}</b>" in planner.summary.value
            curve = plots.retention_curve(
                planner.threads_frame, [waiting], planner.policy, now=planner.when
            )
            kept = curve.axes[0].get_lines()[0].get_ydata()[0]
            assert kept == len(planner.frame) - total["threads"]


# ---------------------------------------------------------------------------- store explorer


def test_explorer_shows_the_picked_thread_and_checkpoint(demo: Store) -> None:
    explorer = StoreExplorer(demo)
    assert css(explorer.thread) == ["durability-explorer-thread"]
    explorer.search.value = "conversation-"  # a search, answered by the store
    assert explorer.page == sorted(explorer.page)
    assert all(t.startswith("conversation-") for t in explorer.page)
    explorer.thread.value = "conversation-1"
    history = demo.history("conversation-1")
    assert explorer.frame["thread_id"].unique().tolist() == ["conversation-1"]
    assert len(explorer.frame) == len(read_thread(demo, "conversation-1"))
    latest = demo.latest("conversation-1")
    assert latest is not None
    assert explorer.state_value == latest.state
    assert "conversations" in explorer.summary.value
    oldest = explorer.checkpoint.options[-1]
    explorer.checkpoint.value = oldest
    assert explorer.state_value == demo.get("conversation-1", oldest).state
    assert explorer.state_value != latest.state
    assert history  # the thread has a history to page through


def test_selecting_a_row_shows_its_thread_in_the_explorer(demo: Store) -> None:
    """The threads table, largest first: selecting a row shows that thread in the explorer;
    the search, the sort and the pages change which rows the list offers."""
    threads = frames.threads(demo)
    picker = RowPicker(threads, sort="size_bytes", rows=5)
    explorer = StoreExplorer(demo)
    picker.drives(explorer)
    assert css(picker.list) == ["durability-rows-list"]
    largest = threads.sort_values("size_bytes", ascending=False, kind="stable")[
        "thread_id"
    ].tolist()
    assert picker.selected is None, "nothing is selected until a row is"
    assert [threads.loc[i, "thread_id"] for _, i in picker.list.options] == largest[:5]
    assert picker.header.value.startswith("<pre>thread_id")
    picker.select(1)  # what a click on the second row does
    assert picker.selected is not None
    assert picker.selected["thread_id"] == largest[1]
    assert explorer.thread.value == largest[1]
    assert explorer.frame["thread_id"].unique().tolist() == [largest[1]]

    picker.next.click()
    assert picker.page.number == 1
    assert picker.list.value is None, "a new page selects nothing"
    assert not picker.previous.disabled
    picker.select(0)
    assert explorer.thread.value == largest[5]

    picker.search.value = "conversation-"
    wanted = sorted(t for t in threads["thread_id"] if t.startswith("conversation-"))
    assert picker.page.number == 0
    assert picker.page.matches == len(wanted)
    assert f"{len(wanted):,} of {len(threads):,} rows" in picker.counter.value
    picker.sort.value = "thread_id"
    picker.descending.value = False
    assert [threads.loc[i, "thread_id"] for _, i in picker.list.options] == wanted[:5]
    picker.select(2)
    assert explorer.thread.value == wanted[2]
    assert explorer.record is not None
    assert explorer.record.thread_id == wanted[2]
    picker.select(2)  # the same row again: the explorer shows it still
    assert explorer.thread.value == wanted[2]


def test_the_picker_pages_through_a_million_thread_ids(tmp_path: Path) -> None:
    """Over a store whose ledger holds 1,000,000 threads (bulk-inserted), the explorer shows a
    page of 100 ids, the next page after it, and what a prefix search finds; never every id."""
    path = tmp_path / "million.db"
    with sqlite_store(path, FrozenClock(DEMO_START)) as store:
        store.put(Checkpoint(thread_id="thread-0543210", checkpoint_id="c-1", state={"n": 1}))
    ids = [f"thread-{n:07d}" for n in range(1_000_000)]
    with sqlite3.connect(path) as db:  # bulk SQL: ledger rows (their keys need only be unique)
        db.execute(
            "WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < 999999) "
            "INSERT INTO durability_threads (tkey, thread_id) "
            "SELECT printf('%032d', x), printf('thread-%07d', x) FROM n"
        )
    with sqlite_store(path, FrozenClock(DEMO_START)) as store:
        explorer = StoreExplorer(store)
        assert explorer.page == ids[:PICKER_PAGE]
        assert list(explorer.thread.options) == ids[:PICKER_PAGE]
        explorer.next_page.click()
        assert explorer.page == ids[PICKER_PAGE : 2 * PICKER_PAGE]
        explorer.search.value = "thread-05432"
        assert explorer.page == ids[543200:543300]
        explorer.search.value = "thread-0543210"
        assert explorer.page == ["thread-0543210"]
        assert explorer.thread.value == "thread-0543210"
        assert explorer.frame["checkpoint_id"].tolist() == ["c-1"]
        explorer.search.value = "thread-2"
        assert explorer.page == []
        assert "no thread id starts with that" in explorer.summary.value


# ---------------------------------------------------------------------------- outbox monitor


def test_release_requeues_the_quarantined_rows(tmp_path: Path) -> None:
    """The quarantined table lists what the plane refused; Release puts it back in the outbox."""
    clock = FrozenClock(DEMO_START)
    with sqlite_store(tmp_path / "outbox.db", clock) as store:
        written = [
            store.put(durability.Checkpoint(thread_id="t", node_id=f"n{i}", state={"i": i}))
            for i in range(4)
        ]
        store.mark_quarantined({("t", written[1].seq or 0): "state too large for the plane"})
        store.mark_quarantined({("t", written[2].seq or 0): "step type too long"})
        store.mark_synced([("t", written[0].seq or 0)])
        clock.advance(timedelta(hours=3))
        monitor = OutboxMonitor(store)
        assert monitor.quarantined_frame["seq"].tolist() == [written[1].seq, written[2].seq]
        assert "state too large" in monitor.quarantined_frame["sync_error"].iloc[0]
        assert not monitor.release_button.disabled
        assert monitor.figure is not None
        assert monitor.figure.get_suptitle() == "Outbox backlog"

        monitor.release_button.click()  # asks first: rows, bytes, and who would send them
        assert len(store.outbox(state="quarantined")) == 2, "nothing released before the confirm"
        size = sum(e.size_bytes for e in store.outbox(state="quarantined"))
        asked = html.unescape(monitor.status.value)
        assert (
            f"release 2 row(s), {format_bytes(size)}, of project(s) '' back into the outbox?"
            in asked
        )
        assert "No drain is running for '': they stay pending until a worker connects." in asked
        assert monitor.confirm.layout.display == "flex"
        monitor.cancel_button.click()
        assert len(store.outbox(state="quarantined")) == 2
        assert monitor.confirm.layout.display == "none"

        monitor.release_button.click()
        monitor.confirm_button.click()
        assert store.outbox(state="quarantined") == []
        pending = [e.seq for e in store.outbox(state="pending")]
        assert pending == [w.seq for w in written[1:]]
        assert monitor.quarantined_frame.empty
        assert monitor.release_button.disabled
        assert "released 2 row(s)" in monitor.status.value


def test_the_monitor_shows_a_backlog_just_read_then_reads_it_anew(tmp_path: Path) -> None:
    """A backlog frame passed in is shown first (no second read of the outbox); Refresh reads
    the store again."""
    clock = FrozenClock(DEMO_START)
    with sqlite_store(tmp_path / "outbox.db", clock) as store:
        store.put(durability.Checkpoint(thread_id="t", node_id="n", state={}))
        clock.advance(timedelta(hours=3))
        read = frames.backlog(store, freq="1h")
        monitor = OutboxMonitor(store, freq="1h", backlog=read)
        assert monitor.backlog_frame is read
        clock.advance(timedelta(hours=2))
        monitor.refresh_button.click()
        assert monitor.backlog_frame is not read
        assert len(monitor.backlog_frame) == len(read) + 2


# ---------------------------------------------------------------------------- restore panel


def link(store: Store, plane: PlaneHandle) -> Connection:
    return connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())


@pytest.fixture
def parked_on_plane(tmp_path: Path, plane: PlaneHandle) -> str:
    """A run parked on machine A and replicated to the plane; its thread id."""
    clock = FrozenClock(DEMO_START)
    with sqlite_store(tmp_path / "machine-a.db", clock) as machine_a:
        conn = link(machine_a, plane)
        parked = runner_defs.approval.start(machine_a, {"topic": "widgets"})
        assert conn.close(timeout=10)
        assert all(e.state == "synced" for e in machine_a.outbox())
        disconnect(machine_a, timeout=5)
    assert parked.park is not None
    return parked.thread_id


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Store]:
    with sqlite_store(tmp_path / "fresh.db", FrozenClock(DEMO_START + timedelta(hours=1))) as s:
        yield s
    disconnect(s, timeout=5)


def test_restore_panel_plans_restores_then_resumes(
    fresh: Store, plane: PlaneHandle, parked_on_plane: str
) -> None:
    """Plan (nothing written), Restore (the thread and its park land), Resume with a value."""
    panel = RestorePanel(fresh, link(fresh, plane), runner=runner_defs.approval)
    assert css(panel.restore_button) == ["durability-restore-restore"]
    assert panel.restore_button.disabled
    panel.thread_id.value = parked_on_plane  # a thread id is planned at once
    assert panel.plan_frame["node_id"].tolist() == ["__start__", "draft", "approve"]
    assert not panel.restore_button.disabled
    panel.plan_button.click()  # planning again changes nothing
    assert panel.plan_frame["node_id"].tolist() == ["__start__", "draft", "approve"]
    assert not fresh.has_thread(parked_on_plane), "a plan is a dry run"
    assert not panel.restore_button.disabled
    assert "would restore 3 checkpoint(s) and its pending park" in panel.status.value

    panel.restore_button.click()
    assert fresh.has_thread(parked_on_plane)
    assert fresh.get_park(parked_on_plane) is not None
    assert "restored 3 checkpoint(s)" in panel.status.value
    assert panel.restore_button.disabled

    panel.resume_value.value = "not json"
    panel.resume_button.click()
    assert "JSONDecodeError" in panel.status.value
    assert fresh.get_park(parked_on_plane) is not None, "a refused resume changes nothing"

    panel.resume_value.value = json.dumps({"approved": True})
    panel.resume_button.click()
    assert panel.run_result is not None
    assert panel.run_result.status == "completed"
    assert panel.run_result.state["published"] is True
    assert "completed" in panel.status.value
    assert read_thread(fresh, parked_on_plane)[-1].node_id == "run_end"

    rows = len(read_thread(fresh, parked_on_plane))
    panel.resume_button.click()  # again: a completed run is explained, never resumed
    assert "a completed run is never resumed; press Fork" in panel.status.value
    assert len(read_thread(fresh, parked_on_plane)) == rows
    panel.fork_button.click()
    forked = panel.run_result.thread_id
    assert forked != parked_on_plane
    assert read_thread(fresh, forked)[0].parent_checkpoint_id is not None
    assert (
        html.unescape(panel.status.value).count(f"forked {parked_on_plane!r} into {forked!r}") == 1
    )


def test_selecting_a_lost_thread_plans_its_restore(
    fresh: Store, plane: PlaneHandle, parked_on_plane: str
) -> None:
    """The table of threads the plane has and the store lacks drives the restore panel: a
    selected row's thread is planned (a dry run), ready for Restore."""
    panel = RestorePanel(fresh, link(fresh, plane), runner=runner_defs.approval)
    lost = pd.DataFrame(
        {"thread_id": ["nobody-has-this", parked_on_plane], "status": ["", "parked"]}
    )
    picker = RowPicker(lost)
    picker.drives(panel)
    picker.select(1)
    assert panel.thread_id.value == parked_on_plane
    assert panel.plan_frame["node_id"].tolist() == ["__start__", "draft", "approve"]
    assert not panel.restore_button.disabled
    assert not fresh.has_thread(parked_on_plane), "selecting plans; only Restore writes"
    picker.select(0)
    assert panel.thread_id.value == "nobody-has-this"
    assert panel.restore_button.disabled


def test_restore_panel_shows_refusals_and_writes_nothing(fresh: Store, plane: PlaneHandle) -> None:
    """A thread the plane lacks plans empty (Restore stays off); an unconnected store is
    refused in the status line."""
    panel = RestorePanel(fresh, link(fresh, plane), runner="runner_defs:approval")
    panel.thread_id.value = "nobody-has-this"
    panel.plan_button.click()
    assert panel.plan is not None
    assert panel.plan.empty
    assert panel.restore_button.disabled
    assert "holds nothing" in panel.status.value
    assert not fresh.has_thread("nobody-has-this")

    disconnect(fresh, timeout=5)
    offline = RestorePanel(fresh)
    offline.thread_id.value = "anything"
    offline.plan_button.click()
    assert "RestoreError" in offline.status.value
    assert "not connected" in offline.status.value
    assert offline.plan is None


def test_views_over_an_empty_store_say_so(tmp_path: Path) -> None:
    """Every view opens on a store holding nothing: no rows, "no data" charts, no failure."""
    with sqlite_store(tmp_path / "empty.db", FrozenClock(DEMO_START)) as store:
        explorer = StoreExplorer(store)
        assert explorer.thread.options == ()
        assert "holds no thread" in explorer.summary.value
        planner = RetentionPlanner(store)
        assert planner.deletes.empty
        assert "would delete <b>0</b> of 0 threads" in planner.summary.value
        planner.waiting.value = 1
        assert planner.deletes.empty
        monitor = OutboxMonitor(store)
        assert monitor.quarantined_frame.empty
        assert monitor.release_button.disabled
        assert monitor.figure is not None
        assert "no data" in [t.get_text() for ax in monitor.figure.axes for t in ax.texts]
