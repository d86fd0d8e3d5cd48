"""A static HTML page of the notebooks' charts and tables, for people not using Jupyter.

:func:`write_report` reads a store through the same frames, plots, sweep plan and simulation
the notebooks use, and writes ``index.html`` with the charts as PNG files beside it (so the
page works offline and the pictures can be reused)::

    from durability.report import write_report

    with durability.open("sqlite:///durability-out/demo.db") as store:
        write_report(store, Path("durability-out/report"))

``durability report URL --out DIR`` is the command. Nothing in the store is changed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durability._util import redact_url
from durability.errors import DurabilityError
from durability.humanize import format_bytes
from durability.settings import Settings, format_duration, parse_duration
from durability.stores.base import Store

if TYPE_CHECKING:
    import pandas as pd

#: Longest table the page shows (the rest is counted, not listed).
MAX_ROWS = 500

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.5rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.8rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: left; }
th { background: #f4f4f4; } img { max-width: 100%; margin: 0.8rem 0; }
caption { caption-side: top; font-weight: bold; text-align: left; padding: 0.4rem 0; }
.dt-container { margin: 0.8rem 0 1.6rem; }
.note { color: #555; }
"""


@dataclass
class Section:
    """One part of the page: a title, an explanation, then charts and tables in order."""

    title: str
    text: str
    parts: list[str] = field(default_factory=list)

    def table(self, frame: pd.DataFrame, caption: str = "") -> None:
        """A sortable, searchable, paged table (:func:`durability.tables.html`) of at most
        :data:`MAX_ROWS` rows; the rest are counted."""
        from durability import tables

        more = len(frame) - MAX_ROWS
        note = f'<p class="note">… and {more:,} more rows</p>' if more > 0 else ""
        self.parts.append(tables.html(frame.head(MAX_ROWS), caption or None) + note)

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{html.escape(text)}</p>')

    def html(self) -> str:
        return f"<h2>{html.escape(self.title)}</h2><p>{html.escape(self.text)}</p>" + "".join(
            self.parts
        )


class _Page:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.sections: list[Section] = []

    def section(self, title: str, text: str) -> Section:
        self.sections.append(Section(title, text))
        return self.sections[-1]

    def chart(self, section: Section, fig: Any, name: str, alt: str) -> None:
        import matplotlib.pyplot as plt

        fig.savefig(self.out / f"{name}.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        section.parts.append(f'<img src="{name}.png" alt="{html.escape(alt)}">')


def _tables_head() -> str:
    from durability import tables

    return tables.page_head()


def write_report(
    store: Store,
    out: Path,
    *,
    settings: Settings | None = None,
    now: datetime | None = None,
    proposed_waiting: str = "7d",
    proposed_finished: str = "2d",
    plane: Any = None,
    outage_length: str = "2d",
    drain_rate: float | None = 0.05,
    size_limit: int | None = None,
) -> Path:
    """Write ``out/index.html`` and its charts (PNG) for ``store``; returns the page's path.

    ``settings`` are the retention values in force (default: from the environment), ``now``
    the sweep's "now" (default: the store's clock), ``proposed_*`` the shorter values the page
    compares them with, ``plane`` a :class:`~durability.replication.PlaneClient` whose run
    health is added, ``outage_length`` and ``drain_rate`` (rows per second; ``None``: at once)
    the plane outage simulated over the recorded writes (``simulate.outage_backlog``, starting
    two outage lengths before the newest write, as ``explore_store.ipynb`` does). A section the
    store cannot answer (a store without an outbox) says so. ``size_limit`` is the size (bytes)
    whose crossing the growth forecast dates (default: twice the store's bytes today).
    """
    import durability.frames as frames

    settings = settings or Settings.from_env()
    at = now or store.clock()
    out.mkdir(parents=True, exist_ok=True)
    page = _Page(out)
    threads = frames.threads(store, now=at)
    _threads_section(page, threads)
    _runs_section(page, store)
    replication = _replication_section(page, store, at)
    _outage_note(page, replication, store, outage_length, drain_rate)
    if plane is not None:
        _plane_runs(page, replication, plane)
    proposed = settings.update(
        waiting_retention=proposed_waiting, finished_retention=proposed_finished
    )
    policies = _retention_section(page, store, threads, settings, proposed, at)
    if len(threads):
        from durability.analyses.sections import add_sections

        add_sections(page, store, policies, at, size_limit=size_limit)
    return _write_page(page, store, at, out)


def _threads_section(page: _Page, threads: Any) -> None:
    s = page.section(
        "Threads",
        f"{len(threads)} threads holding {int(threads.checkpoints.sum())} checkpoints "
        f"({format_bytes(int(threads.size_bytes.sum()))}). A thread is one conversation, flow session "
        "or agent session.",
    )
    if len(threads):
        s.table(
            threads.groupby("owner", dropna=False)
            .agg(
                threads=("thread_id", "size"),
                checkpoints=("checkpoints", "sum"),
                finished=("finished_at", "count"),
            )
            .reset_index(),
            "by owner",
        )


def _runs_section(page: _Page, store: Store) -> None:
    import durability.frames as frames
    import durability.plots as plots

    runs = frames.runs(store)
    s = page.section(
        "Runs",
        "How each run ended: completed, failed (with its reason), or parked on a human answer.",
    )
    if len(runs):
        s.table(runs.groupby(["runner", "status"], observed=True).size().reset_index(name="runs"))
        page.chart(s, plots.run_health(runs), "run_health", "runs by status over time")
        failed = runs[runs.status == "failed"]
        if len(failed):
            s.table(
                failed.groupby("reason", dropna=False).size().reset_index(name="runs"),
                "failed runs by reason (error, cancelled, aborted, timeout)",
            )


def _replication_section(page: _Page, store: Store, at: datetime) -> Section:
    """The outbox by state, its quarantined rows and its backlog."""
    import durability.frames as frames
    import durability.plots as plots

    s = page.section(
        "Replication",
        "Synced rows reached the plane; pending rows wait for it; quarantined rows were refused "
        "by the plane, with its reason.",
    )
    try:
        outbox = frames.outbox(store, now=at)
    except DurabilityError as exc:
        s.note(f"this store keeps no outbox: {exc}")
    else:
        s.table(
            outbox.groupby("state", observed=True)
            .agg(rows=("checkpoint_id", "size"), bytes=("size_bytes", "sum"))
            .reset_index()
        )
        stuck = outbox[outbox.state == "quarantined"]
        if len(stuck):
            s.table(
                stuck[["thread_id", "checkpoint_id", "size_bytes", "sync_error"]], "quarantined"
            )
            s.note(
                "Once the plane accepts them (its cap raised, say), put them back in the outbox "
                f"with `durability outbox release {redact_url(store.url)}` (or the Release button "
                "of explore_store.ipynb's outbox monitor); the next drain sends them again."
            )
        if len(outbox):
            page.chart(
                s, plots.backlog(frames.backlog(store, freq="6h")), "backlog", "backlog over time"
            )
    return s


def _plane_runs(page: _Page, s: Section, plane: Any) -> None:
    import durability.frames as frames
    import durability.plots as plots

    plane_runs = frames.plane_runs(plane)
    s.table(
        plane_runs.groupby("status", observed=True).size().reset_index(name="runs"),
        "runs on the plane",
    )
    if len(plane_runs):
        project = plane.auth_check().get("project_id") or "?"
        page.chart(
            s,
            plots.run_health(plane_runs, source=f"plane, project {project}"),
            "plane_run_health",
            "runs on the plane by status over time",
        )


def _outage_note(
    page: _Page, s: Section, store: Store, outage_length: str, drain_rate: float | None
) -> None:
    """The recorded writes replayed against a plane outage of ``outage_length``."""
    import durability.frames as frames
    import durability.plots as plots
    import durability.simulate as simulate

    checkpoints = frames.checkpoints(store)
    if not len(checkpoints):
        return
    length = parse_duration(outage_length, name="outage length")
    start = checkpoints.created_at.max().to_pydatetime() - 2 * length
    outage = simulate.outage_backlog(checkpoints, start, length, drain_rate)
    rate = "at once" if drain_rate is None else f"at {drain_rate:g} rows/s"
    s.note(
        f"The recorded writes replayed against a plane outage, the outbox draining {rate} "
        f"once it ends: {simulate.describe_outage(outage)}."
    )
    page.chart(
        s,
        plots.backlog(outage, title=f"Outbox backlog under a {outage_length} plane outage"),
        "outage_backlog",
        "the backlog a plane outage would build",
    )


def _retention_section(
    page: _Page,
    store: Store,
    threads: Any,
    settings: Settings,
    proposed: Settings,
    at: datetime,
) -> list[Any]:
    """The next sweep under ``settings`` and what ``proposed`` would cost; the two policies."""
    import durability.simulate as simulate
    import durability.sweep as sweep

    s = page.section(
        "Retention",
        f"The next sweep at {at:%Y-%m-%d %H:%M} UTC with waiting "
        f"{format_duration(settings.waiting_retention)} and finished "
        f"{format_duration(settings.finished_retention)}: what it deletes and why, and what "
        f"waiting {format_duration(proposed.waiting_retention)} / finished "
        f"{format_duration(proposed.finished_retention)} would cost.",
    )
    try:
        plan = sweep.plan_sweep(store, settings, at)
    except DurabilityError as exc:
        s.note(f"the sweep cannot plan on this store: {exc}")
    else:
        rows = plan.to_frame()
        s.table(
            rows.groupby(["horizon", "action"])
            .agg(threads=("thread_id", "size"), bytes=("size_bytes", "sum"))
            .reset_index(),
            "the next sweep",
        )
        s.table(
            rows[rows.action == "delete"][["thread_id", "horizon", "reason", "due_at"]],
            "deleted by the next sweep",
        )
    policies = [simulate.Policy.from_settings(settings), simulate.Policy.from_settings(proposed)]
    if len(threads):
        _retention_charts(page, s, threads, settings, proposed, policies, at)
    return policies


def _retention_charts(
    page: _Page,
    s: Section,
    threads: Any,
    settings: Settings,
    proposed: Settings,
    policies: list[Any],
    at: datetime,
) -> None:
    import durability.plots as plots
    import durability.simulate as simulate

    waitings = [parse_duration(f"{d}d") for d in (1, 2, 3, 5, 7, 10, 14, 21, 30, 45, 60)]
    page.chart(
        s,
        plots.retention_curve(
            threads,
            waitings,
            current=settings.waiting_retention,
            proposed=proposed.waiting_retention,
        ),
        "retention_curve",
        "threads kept against the waiting value",
    )
    page.chart(
        s,
        plots.idle_gaps(threads, proposed.waiting_retention, in_force=settings),
        "idle_gaps",
        "longest idle gap per thread",
    )
    lost = simulate.lost_conversations(threads, proposed.waiting_retention)
    waiting = format_duration(proposed.waiting_retention)
    s.note(f"waiting {waiting} would lose {len(lost)} threads between two turns")
    page.chart(
        s,
        plots.sweep_timeline(simulate.daily(threads, policies, at, 28), in_force=policies[0].label),
        "sweep_timeline",
        "daily sweeps over four weeks",
    )


def _write_page(page: _Page, store: Store, at: datetime, out: Path) -> Path:
    path = out / "index.html"
    title = f"durability report: {redact_url(store.url)}"
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>{_tables_head()}</head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="note">as of {at:%Y-%m-%d %H:%M} UTC</p>'
        + "".join(sec.html() for sec in page.sections)
        + "</body></html>\n"
    )
    return path
