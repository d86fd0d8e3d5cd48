"""Charts of the analysis frames, as matplotlib figures.

Every function takes frames (:mod:`durability.frames`, :mod:`durability.simulate`) and returns
a :class:`matplotlib.figure.Figure` (a :class:`Chart`) built with the object API: no pyplot
state, nothing shown, so the same call works in a notebook (the figure displays itself as a
PNG), a headless report (``fig.savefig("chart.png")``) and a test. Layouts are constrained
(labels never overlap; a test checks every text box of every chart), legends that could cover
data sit outside the axes, dates use matplotlib's concise formatter and are UTC, durations are
in the unit that reads best (minutes, hours or days) and bytes in the binary unit (KiB, MiB,
GiB) of the largest value plotted. An empty frame gives a figure that says "no data" instead of
failing.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from durability._extras import needs_extra

with needs_extra("durability.plots"):  # the notebook extra
    import numpy as np
    import pandas as pd
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, num2date
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

from durability import simulate, vocabulary
from durability.settings import Settings, format_duration, parse_duration

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: The text of the figure an empty frame gets.
NO_DATA = "no data"

#: Colours of run and thread statuses (:mod:`durability.vocabulary`; anything else is grey).
STATUS_COLOURS = vocabulary.STATUS_COLOURS
HORIZON_COLOURS = vocabulary.HORIZON_COLOURS

#: The sweep timeline cuts its first day's bar when it is this many times the tallest later one.
FIRST_DAY_CLIP = 3

#: The frame of a note written over a chart (a flat line's reason, a cut bar's count).
_NOTE_BOX = {"boxstyle": "round", "facecolor": "white", "edgecolor": "grey"}

_UNITS = (("days", 86_400.0), ("hours", 3_600.0), ("minutes", 60.0), ("seconds", 1.0))
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


# ---------------------------------------------------------------------------- helpers


class Chart(Figure):
    """A :class:`~matplotlib.figure.Figure` that IPython shows as a PNG.

    A figure built without pyplot has no display formatter in a kernel (it would show as
    ``<Figure size …>``); this one renders itself, whatever the backend.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png")
        return buffer.getvalue()


def human_bytes(value: float) -> str:
    """``1536`` -> ``1.5 KiB``; what the bytes axes show."""
    size = float(value)
    for unit in _BYTE_UNITS:
        if abs(size) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def duration_unit(longest: timedelta | pd.Timedelta | None) -> tuple[str, float]:
    """The unit (name, seconds) durations up to ``longest`` read best in."""
    seconds = 0.0 if longest is None or pd.isna(longest) else pd.Timedelta(longest).total_seconds()
    for name, size in _UNITS:
        if seconds >= 2 * size:
            return name, size
    return "seconds", 1.0


def _figure(title: str, rows: int = 1, *, sharex: bool = False, height: float = 3.2) -> Figure:
    fig = Chart(figsize=(9, height * rows + 0.6), layout="constrained")
    fig.suptitle(title, fontsize="large", fontweight="bold")
    fig.subplots(rows, 1, sharex=sharex, squeeze=False)
    return fig


def _no_data(title: str, why: str = NO_DATA) -> Figure:
    fig = Chart(figsize=(9, 3), layout="constrained")
    fig.suptitle(title, fontsize="large", fontweight="bold")
    ax = fig.subplots()
    ax.set_axis_off()
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize="x-large", color="grey")
    return fig


def _utc(values: Any) -> np.ndarray[Any, Any]:
    """Aware datetimes as naive UTC datetime64, which matplotlib's date axis reads."""
    series = pd.to_datetime(pd.Series(values), utc=True)
    return np.asarray(series.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]"))


def _date_axis(ax: Axes, label: str = "time (UTC)") -> None:
    """A UTC date axis whose tick labels name their own month, and whose label gives the span.

    matplotlib's concise formatter writes the year and month once, as an offset taken from the
    last tick ("2027-Jan" under an axis that is mostly December). Here day ticks read
    ``Dec 03``, month ticks ``Dec 2026``, and the axis label says which dates the data spans,
    so no label can disagree with the data under it. Call it after plotting.
    """
    # Ticks a fixed interval apart (not snapped to month starts, which put "Nov 29" and
    # "Dec 01" side by side).
    locator = AutoDateLocator(interval_multiples=False)  # type: ignore[no-untyped-call]
    formatter = ConciseDateFormatter(  # type: ignore[no-untyped-call]
        locator,
        formats=["%Y", "%b %Y", "%b %d", "%H:%M", "%H:%M", "%S.%f"],
        zero_formats=["", "%b %Y", "%b %d", "%b %d", "%H:%M", "%H:%M"],
        show_offset=False,
    )
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(formatter)
    low, high = ax.dataLim.intervalx
    if np.isfinite(low) and np.isfinite(high) and high >= low:
        first, last = num2date(low), num2date(high)  # type: ignore[no-untyped-call]
        span = (
            f"{first:%Y-%m-%d}"
            if first.date() == last.date()
            else (f"{first:%Y-%m-%d} to {last:%Y-%m-%d}")
        )
        label = f"{label}, {span}"
    ax.set_xlabel(label)


def _policy_line(ax: Axes, x: float, role: str, label: str) -> None:
    """A vertical line at a policy's value, in its role's colour, labelled with the role."""
    ax.axvline(
        x,
        **vocabulary.policy_style(role),
        linewidth=1.8,
        label=vocabulary.policy_role(label, role),
    )


def bytes_unit(largest: float) -> tuple[str, float]:
    """The binary unit (name, size) byte counts up to ``largest`` read best in."""
    size = 1.0
    for unit in _BYTE_UNITS:
        if abs(largest) < 1024 * size or unit == _BYTE_UNITS[-1]:
            return unit, size
        size *= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _colours(n: int) -> list[Any]:
    """``n`` distinct line colours: the tab10 cycle up to ten, else a sequential colormap (the
    cycle would repeat colours)."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    return list(colormaps["viridis"](np.linspace(0.0, 0.92, n)))


_Outside = Literal["outside right upper", "outside right lower", "outside upper right"]


def _outside_legend(
    fig: Figure, ax: Axes, *, title: str | None = None, loc: _Outside = "outside right upper"
) -> None:
    """The legend of ``ax``'s labelled artists in the figure's margin, where it can cover no
    data; a long one wraps into columns."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    fig.legend(
        handles,
        labels,
        loc=loc,
        title=title,
        fontsize="small",
        ncols=max(1, -(-len(handles) // 18)),
    )


def _count_axis(ax: Axes, label: str) -> None:
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(label)
    ax.set_ylim(bottom=0)


def _in_unit(values: Any, size: float) -> np.ndarray[Any, Any]:
    seconds = pd.to_timedelta(pd.Series(values)).dt.total_seconds()
    return np.asarray(seconds.to_numpy(dtype=float) / size)


# ---------------------------------------------------------------------------- backlog


def backlog(backlog_df: pd.DataFrame, *, title: str = "Outbox backlog") -> Figure:
    """Pending outbox rows and the age of the oldest one over time, in two panels.

    ``backlog_df`` is ``frames.backlog(store)`` or ``simulate.outage_backlog(...)``; a
    simulated outage (``attrs["outage_start"]``/``["outage_end"]``) is shaded.
    """
    if backlog_df.empty:
        return _no_data(title)
    fig = _figure(title, 2, sharex=True)
    top, bottom = fig.axes
    times = _utc(backlog_df["time"])
    top.plot(times, backlog_df["pending"].to_numpy(), drawstyle="steps-post", color="tab:blue")
    top.set_title("Rows waiting to replicate")
    _count_axis(top, "pending rows")
    ages = pd.to_timedelta(backlog_df["oldest_pending_age"])
    unit, size = duration_unit(ages.max())
    bottom.plot(times, np.nan_to_num(_in_unit(ages, size)), drawstyle="steps-post", color="tab:red")
    bottom.set_title("Age of the oldest pending row")
    bottom.set_ylabel(f"age ({unit})")
    bottom.set_ylim(bottom=0)
    _date_axis(bottom)
    if "outage_start" in backlog_df.attrs and "outage_end" in backlog_df.attrs:
        span = _utc([backlog_df.attrs["outage_start"], backlog_df.attrs["outage_end"]])
        for ax in (top, bottom):
            ax.axvspan(span[0], span[1], color="grey", alpha=0.2, label="plane outage")
        _outside_legend(fig, top, loc="outside upper right")
    return fig


# ---------------------------------------------------------------------------- retention


def _waiting_days(values: Sequence[timedelta | str | float]) -> list[timedelta]:
    """Waiting values; a bare number is days."""
    return [
        timedelta(days=float(v))
        if isinstance(v, int | float)
        else parse_duration(v, name="waiting")
        for v in values
    ]


def retention_curve(
    threads: pd.DataFrame,
    waitings: Sequence[timedelta | str | float],
    current: simulate.Policy | Settings | timedelta | None = None,
    *,
    proposed: simulate.Policy | Settings | timedelta | str | None = None,
    finished: timedelta | None = None,
    now: datetime | None = None,
) -> Figure:
    """Threads and bytes a sweep at ``now`` would keep, against the waiting value.

    The value in force is a solid line in the in-force colour, a proposed one a dashed line in
    the proposed colour (:mod:`durability.vocabulary`), each labelled with its role. When every
    point keeps the same bytes the bytes panel says why: the threads no value deletes hold them.

    Args:
        threads: ``frames.threads(store)``.
        waitings: the waiting values to try (timedeltas, duration texts, or numbers of days).
        current: the setting in force, marked on both panels (a policy, settings or a waiting
            value); its finished value is used for every point unless ``finished`` is given.
        proposed: a proposed waiting value (or policy), marked on both panels.
        finished: the finished value for every point (default the current one, else 7 days),
            capped at each waiting value.
        now: when the sweep runs (default: now).
    """
    title = "Retention planning: what a sweep keeps"
    values = sorted(_waiting_days(waitings))
    if threads.empty or not values:
        return _no_data(title)
    marked = None if current is None else simulate.as_policy(current)
    finish = finished or (marked.finished if marked is not None else None)
    at = (now or datetime.now(UTC)).astimezone(UTC)
    policies = [simulate.as_policy(w, finished=finish) for w in values]
    kept = simulate.kept(threads, policies, at)
    days = np.array([w.total_seconds() / 86_400 for w in values])
    fig = _figure(f"{title} on {at:%Y-%m-%d %H:%M} UTC", 2, sharex=True)
    top, bottom = fig.axes
    top.plot(days, kept["kept_threads"].to_numpy(), marker="o", color="tab:blue")
    top.set_title(f"Threads kept (of {len(threads):,})")
    _count_axis(top, "threads kept")
    _bytes_kept_panel(
        bottom, days, kept["kept_bytes"].to_numpy(), float(threads["size_bytes"].sum())
    )
    marks = [(marked, vocabulary.IN_FORCE)]
    if proposed is not None:
        marks.append((simulate.as_policy(proposed, finished=finish), vocabulary.PROPOSED))
    for policy, role in marks:
        if policy is None:
            continue
        x = policy.waiting.total_seconds() / 86_400
        for ax in (top, bottom):
            _policy_line(ax, x, role, f"waiting {format_duration(policy.waiting)}")
    if marked is not None or proposed is not None:
        top.legend(loc="lower right", fontsize="small")
    return fig


def _bytes_kept_panel(
    ax: Axes, days: np.ndarray[Any, Any], kept_bytes: np.ndarray[Any, Any], total: float
) -> None:
    """The retention curve's bytes panel; a flat curve says why it is flat."""
    unit, size = bytes_unit(float(kept_bytes.max()))  # the values plotted, not the total
    ax.plot(days, kept_bytes / size, marker="o", color="tab:green")
    ax.set_title(f"Bytes kept (of {human_bytes(total)})")
    ax.set_ylabel(f"bytes kept ({unit})")
    ax.set_ylim(0, max(float(kept_bytes.max()) / size, 1.0) * 1.08)
    ax.set_xlabel("waiting retention (days)")
    if float(kept_bytes.max()) == float(kept_bytes.min()):
        ax.text(
            0.5,
            0.5,
            f"flat: every value tried keeps the same {human_bytes(float(kept_bytes[0]))}, held "
            "by threads none of them deletes",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize="small",
            bbox=_NOTE_BOX,
        )


def idle_gaps(
    threads: pd.DataFrame,
    waiting: timedelta | str | simulate.Policy,
    *,
    in_force: timedelta | str | simulate.Policy | Settings | None = None,
) -> Figure:
    """The distribution of each thread's longest idle gap, with the proposed waiting horizon
    (dashed, the proposed colour) and, when given, the one in force (solid, the in-force colour).

    Threads to the right of the proposed line would have been deleted between two of their
    turns by a sweep with that waiting value (see :func:`durability.simulate.lost_conversations`).
    A frame of :func:`durability.frames.idle_gaps` from a sample says so in the title, and how
    large the sample is.
    """
    title = "Longest idle gap per thread"
    if (sample := threads.attrs.get("sample")) is not None:
        title += f" (a sample of {sample['threads']:,} of {sample['of']:,} threads)"
    gaps = pd.to_timedelta(threads["max_idle_gap"]).dropna() if len(threads) else pd.Series()
    if gaps.empty:
        return _no_data(title, f"{NO_DATA}: no thread has two checkpoints yet")
    horizon = simulate.as_policy(waiting).waiting
    current = None if in_force is None else simulate.as_policy(in_force).waiting
    longest = max(gaps.max(), pd.Timedelta(horizon), pd.Timedelta(current or horizon))
    unit, size = duration_unit(longest)
    values = _in_unit(gaps, size)
    beyond = len(simulate.lost_conversations(threads, horizon))  # declared values cap it
    fig = _figure(title)
    ax = fig.axes[0]
    ax.hist(values, bins=min(40, max(5, len(values) // 2)), color="tab:blue", alpha=0.8)
    if current is not None:
        label = f"waiting {format_duration(current)}"
        _policy_line(ax, current.total_seconds() / size, vocabulary.IN_FORCE, label)
    if current is None or current != horizon:
        label = f"waiting {format_duration(horizon)}"
        _policy_line(ax, horizon.total_seconds() / size, vocabulary.PROPOSED, label)
    which = "in force" if current == horizon else "proposed"
    ax.set_title(
        f"{beyond} of {len(gaps):,} threads idle longer than the {which} waiting "
        f"{format_duration(horizon)}"
    )
    ax.set_xlabel(f"longest gap between consecutive checkpoints ({unit})")
    _count_axis(ax, "threads")
    ax.legend(loc="upper right", fontsize="small")
    return fig


# ---------------------------------------------------------------------------- sweep timeline


def sweep_timeline(
    daily_df: pd.DataFrame,
    *,
    policy: str | None = None,
    in_force: str | None = None,
    log: bool = False,
) -> Figure:
    """The daily sweeps of :func:`durability.simulate.daily`: what remains, what goes by horizon.

    Top: threads remaining after each sweep, one line per policy (``policy``'s drawn thicker),
    the legend outside the axes. Bottom: threads deleted each day, finished and waiting horizons
    stacked, for ``policy`` (a label; default the first). The first sweep deletes the whole
    backlog already due: when its bar is more than :data:`FIRST_DAY_CLIP` times the tallest of
    the others it is cut at the axis top and its count written on it, so the later days stay
    readable; ``log=True`` draws the counts on a symmetric log axis instead.

    ``in_force`` is the label of the policy in force: its line is solid in the in-force colour,
    every other policy is proposed (dashed; the proposed colour when there is one, distinct
    colours when there are several), and the legend says which is which. ``policy`` defaults
    to the first proposed policy. A line that stays flat is explained under the chart.
    """
    title = "Sweep timeline"
    if daily_df.empty:
        return _no_data(title)
    labels = list(dict.fromkeys(daily_df["policy"].tolist()))
    proposals = [label for label in labels if label != in_force]
    chosen = policy if policy is not None else (proposals or labels)[0]
    if chosen not in labels or (in_force is not None and in_force not in labels):
        raise ValueError(
            f"cannot draw the sweep timeline of policy {chosen!r} (in force: {in_force!r}): the "
            f"frame holds {labels}; pass those labels"
        )
    fig = _figure(title, 2, sharex=True)
    top, bottom = fig.axes
    _timeline_lines(top, daily_df, labels, in_force, chosen)
    top.set_title("Threads remaining after each daily sweep")
    _count_axis(top, "threads")
    _outside_legend(fig, top, title="policy")
    _deleted_bars(bottom, daily_df[daily_df["policy"] == chosen], log=log)
    bottom.set_title(f"Threads deleted per day by horizon: {chosen}")
    _outside_legend(fig, bottom, title="horizon", loc="outside right lower")
    _date_axis(bottom, "sweep day (UTC)")
    return fig


def _deleted_bars(ax: Axes, rows: pd.DataFrame, *, log: bool) -> None:
    """The sweep timeline's bottom panel: threads deleted each day, stacked by horizon.

    A first day taller than :data:`FIRST_DAY_CLIP` times the later ones is cut at the axis top
    with its count written on it, unless ``log`` draws the counts on a symmetric log axis.
    """
    days = _utc(rows["day"])
    finished = rows["deleted_finished_threads"].to_numpy()
    waiting = rows["deleted_waiting_threads"].to_numpy()
    ax.bar(days, finished, width=0.8, color=HORIZON_COLOURS["finished"], label="finished")
    ax.bar(
        days, waiting, width=0.8, bottom=finished, color=HORIZON_COLOURS["waiting"], label="waiting"
    )
    _count_axis(ax, "threads deleted")
    totals = finished + waiting
    later = int(totals[1:].max()) if len(totals) > 1 else 0
    if log:
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, max(2.0, float(totals.max()) * 2))
        ax.set_ylabel("threads deleted (log scale)")
    elif later and totals[0] > FIRST_DAY_CLIP * later:
        ceiling = max(later * 1.5, later + 1.0)
        ax.set_ylim(0, ceiling)
        ax.annotate(
            f"first sweep: {int(totals[0]):,} (bar cut)",
            xy=(days[0], ceiling),
            xytext=(12, -4),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize="small",
            bbox=_NOTE_BOX,
        )


def _timeline_lines(
    ax: Axes, daily_df: pd.DataFrame, labels: list[str], in_force: str | None, chosen: str
) -> None:
    """One line per policy: in force solid, proposed dashed, ``chosen`` thicker."""
    proposals = [label for label in labels if label != in_force]
    colours = [vocabulary.PROPOSED_COLOUR] if len(proposals) == 1 else _colours(len(proposals))
    flat = []
    for label in labels:
        rows = daily_df[daily_df["policy"] == label]
        remaining = rows["remaining_threads"].to_numpy()
        if len(remaining) > 1 and remaining.min() == remaining.max():
            flat.append(label)
        if label == in_force:
            style = vocabulary.policy_style(vocabulary.IN_FORCE)
            name = vocabulary.policy_role(label, vocabulary.IN_FORCE)
        else:
            style = {"color": colours[proposals.index(label)], "linestyle": "--"}
            name = vocabulary.policy_role(label, vocabulary.PROPOSED) if in_force else label
        ax.plot(
            _utc(rows["day"]),
            remaining,
            label=name,
            linewidth=2.6 if label == chosen else 1.6,
            zorder=3 if label == chosen else 2,
            **style,
        )
    if flat:
        ax.text(
            0.01,
            0.04,
            f"flat ({', '.join(flat)}): no thread of the store comes due in the window "
            "(every one is spared, or due after it)",
            transform=ax.transAxes,
            fontsize="small",
            color="grey",
        )


# ---------------------------------------------------------------------------- run health


def run_health(runs_df: pd.DataFrame, *, source: str | None = None) -> Figure:
    """Runs started per day by status, and each runner's runs by status (``frames.runs``).

    ``source`` names where the runs were read when it is not the local store, and goes in the
    title: ``run_health(frames.plane_runs(conn), source="plane, project edge")``.
    """
    title = "Run health" if source is None else f"Run health ({source})"
    if runs_df.empty:
        return _no_data(title)
    runs = runs_df.assign(
        status=runs_df["status"].astype("string").fillna("unknown"),
        day=pd.to_datetime(runs_df["started_at"], utc=True).dt.floor("D"),
        runner=runs_df["runner"].astype("string").fillna("?"),
    )
    statuses = sorted(runs["status"].unique(), key=lambda s: (s not in STATUS_COLOURS, s))
    fig = _figure(title, 2, height=3.0)
    top, bottom = fig.axes
    per_day = runs.dropna(subset=["day"]).pivot_table(
        index="day", columns="status", values="run_id", aggfunc="count", fill_value=0
    )
    base = np.zeros(len(per_day))
    for status in statuses:
        counts = per_day[status].to_numpy() if status in per_day else np.zeros(len(per_day))
        colour = vocabulary.status_colour(status)
        top.bar(_utc(per_day.index), counts, width=0.8, bottom=base, color=colour, label=status)
        base = base + counts
    top.set_title("Runs started per day")
    _count_axis(top, "runs")
    _date_axis(top, "day (UTC)")
    _outside_legend(fig, top, title="status")
    per_runner = runs.pivot_table(
        index="runner", columns="status", values="run_id", aggfunc="count", fill_value=0
    )
    left = np.zeros(len(per_runner))
    for status in statuses:
        counts = per_runner[status].to_numpy() if status in per_runner else np.zeros(len(left))
        colour = vocabulary.status_colour(status)
        bottom.barh(per_runner.index.tolist(), counts, left=left, color=colour, label=status)
        left = left + counts
    bottom.set_title("Runs per runner by status")
    bottom.set_xlabel("runs")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_ylabel("runner")
    return fig


__all__ = [
    "FIRST_DAY_CLIP",
    "NO_DATA",
    "Chart",
    "backlog",
    "bytes_unit",
    "duration_unit",
    "human_bytes",
    "idle_gaps",
    "retention_curve",
    "run_health",
    "sweep_timeline",
]


# ---------------------------------------------------------------------------- encryption

#: Colours of the encryption view's key statuses.
KEY_STATUS_COLOURS = {
    "current": "tab:green",
    "older": "tab:orange",
    "missing": "tab:red",
    "clear": "tab:grey",
}


def encryption(encryption_df: pd.DataFrame, *, title: str = "Encryption coverage") -> Figure:
    """Rows per key id, coloured by status (``frames.encryption(store)``), with the share of rows
    encrypted in the title."""
    if encryption_df.empty:
        return _no_data(title)
    percent = encryption_df.attrs.get("percent_encrypted")
    if (sampled := encryption_df.attrs.get("sampled")) is not None:
        title = f"{title} (estimated from a sample of {sampled:,} rows)"
    fig = _figure(title if percent is None else f"{title}: {percent:.1f} % of rows encrypted")
    ax = fig.axes[0]
    labels = [str(k) if not pd.isna(k) else "(clear)" for k in encryption_df["key_id"]]
    colours = [KEY_STATUS_COLOURS.get(str(s), "tab:grey") for s in encryption_df["status"]]
    ax.barh(labels, encryption_df["rows"].to_numpy(), color=colours)
    ax.invert_yaxis()
    ax.set_xlabel("checkpoint rows")
    ax.set_ylabel("key id")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    from matplotlib.patches import Patch

    shown = set(encryption_df["status"].astype(str))
    handles = [Patch(color=c, label=s) for s, c in KEY_STATUS_COLOURS.items() if s in shown]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    return fig
