"""durability.plots: each chart is a Figure with its title, units and data-driven elements."""

from __future__ import annotations

import itertools
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
from conftest import REPLICATED_DEMO_END
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

import durability
from durability import analyses, frames, plots
from durability.analyses import charts
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
    """x of the policy markers (vertical lines labelled in force / proposed) on one panel."""
    ax = fig.axes[ax_index]
    return [
        float(np.asarray(line.get_xdata())[0])
        for line in ax.get_lines()
        if str(line.get_label()).startswith(("in force:", "proposed:"))
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
    assert bottom.get_xlabel() == "time (UTC), 2026-06-01"
    assert len(top.get_lines()) == 1
    assert list(top.get_lines()[0].get_ydata()) == list(range(6))
    assert png(fig).startswith(b"\x89PNG")


def legend_texts(fig: Figure) -> list[list[str]]:
    """The texts of each legend of the figure (figure legends: outside the axes)."""
    return [[t.get_text() for t in legend.get_texts()] for legend in fig.legends]


def test_a_simulated_outage_is_shaded_on_the_backlog() -> None:
    created = [T0 + timedelta(minutes=i) for i in range(120)]
    frame = outage_backlog(checkpoints_frame(created), T0 + timedelta(minutes=30), "30m")
    fig = plots.backlog(frame)
    assert "plane outage" in [p.get_label() for p in fig.axes[0].patches]
    assert legend_texts(fig) == [["plane outage"]], "beside the chart, not on the drain curve"
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


def test_the_bytes_panel_reads_in_the_unit_of_the_values_plotted() -> None:
    """A store of 8 MiB of which a few KiB are kept reads in KiB, not in 0.005 MiB."""
    old = [thread("big", newest_at=T0 - DAY * 90, size=8 * 1024 * 1024)]
    recent = [thread(f"t{i}", newest_at=T0 - DAY, size=2048) for i in range(3)]
    fig = plots.retention_curve(threads_frame(old + recent), [7, 30], now=T0)
    bytes_panel = fig.axes[1]
    assert bytes_panel.get_title() == "Bytes kept (of 8.01 MiB)"
    assert bytes_panel.get_ylabel() == "bytes kept (KiB)"
    assert list(bytes_panel.get_lines()[0].get_ydata()) == [6.0, 6.0]
    assert bytes_panel.get_ylim()[1] > 6.0, "the highest point is not on the frame"


def test_idle_gaps_draws_the_horizon_where_asked(threads: object) -> None:
    fig = plots.idle_gaps(threads, timedelta(days=2))
    ax = fig.axes[0]
    assert fig.get_suptitle() == "Longest idle gap per thread"
    assert ax.get_xlabel() == "longest gap between consecutive checkpoints (days)"
    assert ax.get_ylabel() == "threads"
    assert vertical_lines_at(fig) == [2.0]
    assert ax.get_title() == "11 of 20 threads idle longer than the proposed waiting 2d"
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
    assert legend_texts(fig) == [[p.label for p in policies], ["finished", "waiting"]]
    assert top.get_legend() is None, "the legends sit outside the axes"
    assert bottom.get_title() == f"Threads deleted per day by horizon: {policies[0].label}"
    assert bottom.get_xlabel().startswith("sweep day (UTC), 2026-")
    heights = [p.get_height() for p in bottom.patches]
    assert sum(heights) == frame[frame["policy"] == policies[0].label]["deleted_threads"].sum()
    chosen = plots.sweep_timeline(frame, policy=policies[2].label)
    assert policies[2].label in chosen.axes[1].get_title()
    with pytest.raises(ValueError, match="pass those labels"):
        plots.sweep_timeline(frame, policy="nope")
    assert png(fig).startswith(b"\x89PNG")


def test_many_policies_keep_their_legend_and_distinct_colours(threads: object) -> None:
    """Twenty policies: every one is in the legend (outside the axes), no colour repeats, and
    the policy of the bars is drawn thicker."""
    policies = [Policy(DAY * w, DAY) for w in range(1, 21)]
    fig = plots.sweep_timeline(daily(threads, policies, T0, 30), policy=policies[4].label)
    lines = fig.axes[0].get_lines()
    assert legend_texts(fig)[0] == [p.label for p in policies]
    assert len({tuple(line.get_color()) for line in lines}) == 20
    widths = [line.get_linewidth() for line in lines]
    assert widths[4] == max(widths) > widths[0]


def test_a_dominant_first_sweep_is_cut_and_labelled_or_drawn_on_a_log_axis() -> None:
    """A first-day bar of 40 beside later ones of 1 would flatten them: it is cut at the axis
    top with its count written on it; `log=True` keeps every bar on a symmetric log axis."""
    rows = [thread(f"old{i}", newest_at=T0 - DAY * 60) for i in range(40)]
    rows += [thread(f"new{i}", newest_at=T0 - DAY * 28 + DAY * i) for i in range(3)]
    frame = daily(threads_frame(rows), Policy(DAY * 30, DAY), T0, 10)
    fig = plots.sweep_timeline(frame)
    bars = fig.axes[1]
    assert bars.get_ylim()[1] == 2.0
    assert texts(fig) == ["first sweep: 40 (bar cut)"]
    log = plots.sweep_timeline(frame, log=True).axes[1]
    assert log.get_yscale() == "symlog"
    assert log.get_ylim()[1] >= 40
    even = daily(threads_frame(rows[38:]), Policy(DAY * 30, DAY), T0, 10)
    assert texts(plots.sweep_timeline(even)) == [], "a first day of 2 beside 1s is not cut"


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
    assert legend_texts(fig) == [["completed", "failed", "parked"]]
    assert png(fig).startswith(b"\x89PNG")
    plane = plots.run_health(runs_frame(rows), source="plane, project edge")
    assert plane.get_suptitle() == "Run health (plane, project edge)"


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
    assert any(text.startswith(plots.NO_DATA) for text in texts(fig))
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
    assert set(legend_texts(figures["run_health"])[0]) == set(runs["status"].astype(str))
    assert sum(p.get_height() for p in figures["run_health"].axes[0].patches) == len(runs)
    assert png(figures["run_health"]).startswith(b"\x89PNG")


# ---------------------------------------------------------------------------- readable layout


def text_boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """Every visible text of the drawn figure with its box on the canvas: titles, axis labels,
    tick labels within the view, offset texts, annotations, legend titles and entries."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    found: list[Text] = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        found += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        found += [ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()]
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = min(lo, hi), max(lo, hi)
            span = (high - low) * 1e-9
            for tick in axis.get_major_ticks():
                if low - span <= tick.get_loc() <= high + span:
                    found += [tick.label1, tick.label2]
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]:
        found += [legend.get_title(), *legend.get_texts()]
    return [
        (t.get_text(), t.get_window_extent(renderer))
        for t in found
        if t.get_visible() and t.get_text().strip()
    ]


def overlapping(boxes: list[tuple[str, Bbox]]) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes share more than a pixel in both directions."""
    clashes = []
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        width = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        height = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if width > 1 and height > 1:
            clashes.append((a, b))
    return clashes


def covered_by_legends(fig: Figure) -> list[str]:
    """The lines and bars some legend of the drawn figure lies on."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    covered = []
    for legend, ax in itertools.product(legends, fig.axes):
        box = legend.get_window_extent(renderer)
        for line in ax.get_lines():
            path = line.get_transform().transform_path(line.get_path())
            if path.intersects_bbox(box, filled=False):
                covered.append(f"line {line.get_label()!r} of {ax.get_title()!r}")
        for bar in ax.containers:
            if any(p.get_window_extent(renderer).overlaps(box) for p in bar.patches):
                covered.append(f"bars of {ax.get_title()!r}")
    return covered


@pytest.fixture(scope="module")
def demo_charts(replicated_demo: str) -> dict[str, Figure]:
    """Every chart the notebooks and the report draw, on the replicated demo fleet, plus the
    hard cases: twenty policies, a log axis, a simulated outage, the plane's run health."""
    now = REPLICATED_DEMO_END
    with durability.open(replicated_demo) as store:
        threads = frames.threads(store, now)
        runs = frames.runs(store)
        checkpoints = frames.checkpoints(store)
        backlog = frames.backlog(store, freq="6h", end=now)
        settings, proposed = Settings(), Policy("7d", "2d")
        analysis = {
            "where_bytes": charts.where_bytes(
                *(analyses.bytes_by(store, by) for by in ("owner", "runner", "node")),
                analyses.bytes_by_state_key(store, sample=50),
            ),
            "forecast": charts.forecast_chart(
                analyses.forecast(store, [settings, proposed], now=now), 8 * 2**20
            ),
            "readiness": charts.readiness_chart(
                analyses.readiness_by_owner(analyses.readiness(store))
            ),
            "backtest": charts.backtest_chart(analyses.backtest(store, proposed, now=now)),
        }
    many = [Policy(DAY * w, DAY * min(w, f)) for w in (1, 3, 7, 14, 30) for f in (1, 2, 7, 14)]
    outage = outage_backlog(checkpoints, now - timedelta(days=20), "2d", drain_rate=0.0005)
    return {
        "backlog": plots.backlog(backlog),
        "outage_backlog": plots.backlog(outage),
        "retention_curve": plots.retention_curve(
            threads, [1, 2, 3, 5, 7, 10, 14, 21, 30, 45, 60], settings, now=now
        ),
        "idle_gaps": plots.idle_gaps(threads, "7d"),
        "sweep_timeline": plots.sweep_timeline(daily(threads, [settings, proposed], now, 28)),
        "sweep_timeline_many": plots.sweep_timeline(daily(threads, many, now, 90)),
        "sweep_timeline_log": plots.sweep_timeline(daily(threads, settings, now, 28), log=True),
        "run_health": plots.run_health(runs),
        "plane_run_health": plots.run_health(runs, source="plane, project main"),
        **analysis,
    }


@pytest.mark.parametrize(
    "name",
    [
        "backlog",
        "outage_backlog",
        "retention_curve",
        "idle_gaps",
        "sweep_timeline",
        "sweep_timeline_many",
        "sweep_timeline_log",
        "run_health",
        "plane_run_health",
        "where_bytes",
        "forecast",
        "readiness",
        "backtest",
    ],
)
def test_no_two_texts_of_a_chart_overlap(demo_charts: dict[str, Figure], name: str) -> None:
    """Drawn on the demo, no tick label, axis label, title, annotation or legend text of a
    chart covers another, and no legend lies on a line or a bar."""
    fig = demo_charts[name]
    boxes = text_boxes(fig)
    assert len(boxes) > 10
    assert overlapping(boxes) == []
    assert covered_by_legends(fig) == []


def test_the_layout_checks_see_a_clash() -> None:
    """The checks above find a legend put on a curve and a title put on a tick label."""
    fig = plots.Chart(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="rising")
    ax.legend(loc="center")
    ax.text(0, 0, "0.0 clash", transform=ax.transData, ha="right", va="top")
    assert covered_by_legends(fig) == ["line 'rising' of ''"]
    assert overlapping(text_boxes(fig)) != []
