"""durability.plots: each chart is a Figure with its title, units and data-driven elements."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from analysis_frames import (
    backlog_frame,
    checkpoints_frame,
    runs_frame,
    thread,
    threads_frame,
)
from matplotlib.figure import Figure

import durability
from durability import frames, plots
from durability.clock import FrozenClock
from durability.demo import DEMO_START, build_demo
from durability.settings import Settings
from durability.simulate import Policy, daily, outage_backlog

T0 = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def png(fig: Figure) -> bytes:
    """The PNG a notebook shows (the figure renders itself: no pyplot formatter needed)."""
    assert isinstance(fig, plots.Chart)
    return fig._repr_png_()


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def vertical_lines_at(fig: Figure, ax_index: int = 0) -> list[float]:
    """x of the dashed vertical lines (the horizon / current-setting markers) on one panel."""
    ax = fig.axes[ax_index]
    return [
        float(np.asarray(line.get_xdata())[0])
        for line in ax.get_lines()
        if line.get_linestyle() == "--"
    ]


@pytest.fixture
def threads() -> object:
    return threads_frame(
        [
            thread(
                f"t{i}",
                newest_at=T0 - DAY * i,
                size=1024 * (i + 1),
                max_idle_gap=timedelta(hours=6 * i),
            )
            for i in range(20)
        ]
    )


def test_human_bytes_and_duration_units() -> None:
    assert plots.human_bytes(512) == "512 B"
    assert plots.human_bytes(1536) == "1.5 KiB"
    assert plots.human_bytes(3 * 1024**3) == "3 GiB"
    assert plots.duration_unit(timedelta(days=3))[0] == "days"
    assert plots.duration_unit(timedelta(hours=5))[0] == "hours"
    assert plots.duration_unit(timedelta(minutes=3))[0] == "minutes"
    assert plots.duration_unit(None)[0] == "seconds"
    assert plots.bytes_unit(5 * 1024**2) == ("MiB", 1024**2)
    assert plots.bytes_unit(10) == ("B", 1)


def test_backlog_has_two_panels_with_units_and_renders() -> None:
    frame = backlog_frame(
        [
            {
                "time": T0 + timedelta(hours=h),
                "pending": h,
                "oldest_pending_age": timedelta(hours=h),
            }
            for h in range(6)
        ]
    )
    fig = plots.backlog(frame)
    assert isinstance(fig, Figure)
    assert fig.get_suptitle() == "Outbox backlog"
    top, bottom = fig.axes
    assert top.get_ylabel() == "pending rows"
    assert bottom.get_ylabel() == "age (hours)"
    assert bottom.get_xlabel() == "time (UTC)"
    assert len(top.get_lines()) == 1
    assert list(top.get_lines()[0].get_ydata()) == list(range(6))
    assert png(fig).startswith(b"\x89PNG")


def test_a_simulated_outage_is_shaded_on_the_backlog() -> None:
    created = [T0 + timedelta(minutes=i) for i in range(120)]
    frame = outage_backlog(checkpoints_frame(created), T0 + timedelta(minutes=30), "30m")
    fig = plots.backlog(frame)
    assert "plane outage" in [p.get_label() for p in fig.axes[0].patches]
    assert max(fig.axes[0].get_lines()[0].get_ydata()) == 30
    assert plots.backlog(backlog_frame([])).get_suptitle() == "Outbox backlog"


def test_retention_curve_marks_the_current_setting_and_follows_the_data(threads: object) -> None:
    """Two panels (threads, bytes kept) against the waiting value; the current one marked."""
    waitings = [2, 5, 10, 30]
    fig = plots.retention_curve(threads, waitings, current=Policy(DAY * 10, DAY), now=T0)
    top, bottom = fig.axes
    assert top.get_ylabel() == "threads kept"
    assert bottom.get_ylabel() == "bytes kept (KiB)"
    assert bottom.get_xlabel() == "waiting retention (days)"
    assert vertical_lines_at(fig) == [10.0]
    curve = top.get_lines()[0]
    assert list(curve.get_xdata()) == [2.0, 5.0, 10.0, 30.0]
    assert list(curve.get_ydata()) == [2, 5, 10, 20]  # kept: newest checkpoint under w days old
    assert list(bottom.get_lines()[0].get_ydata()) == [3, 15, 55, 210]  # KiB: 1+2+...+w
    other = plots.retention_curve(threads, waitings, current=timedelta(days=5), now=T0)
    assert vertical_lines_at(other) == [5.0]
    assert png(fig).startswith(b"\x89PNG")


def test_idle_gaps_draws_the_horizon_where_asked(threads: object) -> None:
    fig = plots.idle_gaps(threads, timedelta(days=2))
    ax = fig.axes[0]
    assert fig.get_suptitle() == "Longest idle gap per thread"
    assert ax.get_xlabel() == "longest gap between consecutive checkpoints (days)"
    assert ax.get_ylabel() == "threads"
    assert vertical_lines_at(fig) == [2.0]
    assert ax.get_title() == "11 of 20 threads idle longer than their waiting horizon"
    longer = plots.idle_gaps(threads, "4d")
    assert vertical_lines_at(longer) == [4.0]
    assert longer.axes[0].get_title().startswith("3 of 20")
    assert png(fig).startswith(b"\x89PNG")


def test_sweep_timeline_has_a_line_per_policy_and_bars_per_horizon(threads: object) -> None:
    policies = [Policy(DAY * 3, DAY), Policy(DAY * 7, DAY), Policy(DAY * 14, DAY)]
    frame = daily(threads, policies, T0, 30)
    fig = plots.sweep_timeline(frame)
    top, bottom = fig.axes
    assert len(top.get_lines()) == 3
    assert [t.get_text() for t in top.get_legend().get_texts()] == [p.label for p in policies]
    assert bottom.get_title() == f"Threads deleted per day by horizon: {policies[0].label}"
    assert bottom.get_xlabel() == "sweep day (UTC)"
    heights = [p.get_height() for p in bottom.patches]
    assert sum(heights) == frame[frame["policy"] == policies[0].label]["deleted_threads"].sum()
    chosen = plots.sweep_timeline(frame, policy=policies[2].label)
    assert policies[2].label in chosen.axes[1].get_title()
    with pytest.raises(ValueError, match="pass one of those labels"):
        plots.sweep_timeline(frame, policy="nope")
    assert png(fig).startswith(b"\x89PNG")


def test_run_health_counts_runs_by_status() -> None:
    rows = [
        {
            "run_id": f"r{i}",
            "thread_id": f"t{i}",
            "runner": "publish" if i % 2 else "assistant",
            "status": ("completed", "failed", "parked")[i % 3],
            "started_at": T0 + DAY * (i // 4),
            "ended_at": T0 + DAY * (i // 4) + timedelta(minutes=1),
            "steps": 3,
            "duration": timedelta(minutes=1),
            "error": None,
        }
        for i in range(12)
    ]
    fig = plots.run_health(runs_frame(rows))
    top, bottom = fig.axes
    assert fig.get_suptitle() == "Run health"
    assert top.get_ylabel() == "runs"
    assert bottom.get_ylabel() == "runner"
    assert sum(p.get_height() for p in top.patches) == 12
    assert sum(p.get_width() for p in bottom.patches) == 12
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["completed", "failed", "parked"]
    assert png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("draw", "title"),
    [
        (lambda: plots.backlog(backlog_frame([])), "Outbox backlog"),
        (
            lambda: plots.retention_curve(threads_frame([]), [1, 2]),
            "Retention planning: what a sweep keeps",
        ),
        (lambda: plots.idle_gaps(threads_frame([]), "1d"), "Longest idle gap per thread"),
        (lambda: plots.run_health(runs_frame([])), "Run health"),
    ],
    ids=["backlog", "retention_curve", "idle_gaps", "run_health"],
)
def test_empty_frames_give_a_figure_that_says_no_data(draw: object, title: str) -> None:
    fig = draw()  # type: ignore[operator]
    assert plots.NO_DATA in texts(fig)
    assert fig.get_suptitle() == title
    assert png(fig).startswith(b"\x89PNG")


def test_an_empty_sweep_timeline_says_no_data() -> None:
    empty = daily(threads_frame([]), Policy(DAY, DAY), T0, 1).iloc[0:0]
    assert plots.NO_DATA in texts(plots.sweep_timeline(empty))


def test_every_chart_draws_a_real_store(tmp_path: Path) -> None:
    """The frames of the runner's demo fleet (SQLite) draw without a "no data" figure."""
    clock = FrozenClock(DEMO_START)
    with durability.open(
        f"sqlite:///{tmp_path / 'demo.db'}", settings=Settings(), single_worker=True, clock=clock
    ) as store:
        build_demo(store, clock, days=12)
        now = DEMO_START + timedelta(days=10)
        threads = frames.threads(store, now)
        runs = frames.runs(store)
        checkpoints = frames.checkpoints(store)
    outage = outage_backlog(checkpoints, DEMO_START, "12h", drain_rate=0.01)
    figures = {
        "backlog": plots.backlog(outage),
        "retention_curve": plots.retention_curve(threads, [1, 3, 7, 30], Settings(), now=now),
        "idle_gaps": plots.idle_gaps(threads, "2d"),
        "sweep_timeline": plots.sweep_timeline(daily(threads, Settings(), now, 30)),
        "run_health": plots.run_health(runs),
    }
    for name, fig in figures.items():
        assert plots.NO_DATA not in texts(fig), name
    legend = figures["run_health"].axes[0].get_legend()
    assert {t.get_text() for t in legend.get_texts()} == set(runs["status"].astype(str))
    assert sum(p.get_height() for p in figures["run_health"].axes[0].patches) == len(runs)
    assert png(figures["run_health"]).startswith(b"\x89PNG")
