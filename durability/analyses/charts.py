"""Charts of the analyses, in the bundle's vocabulary (:mod:`durability.vocabulary`): the
policy in force solid black, a proposed one dashed purple, restore answers in status colours.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from durability import plots, vocabulary
from durability.analyses.backtest import Backtest
from durability.analyses.common import RESTORABLE
from durability.analyses.forecast import crossing
from durability.humanize import format_bytes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The colour of each restore answer.
RESTORE_COLOURS = {"everything": "tab:green", "partly": "tab:orange", "nothing": "tab:red"}
#: Bars a "where the bytes are" panel shows (the rest are summed into one).
TOP_BARS = 8


def _bars(ax: Axes, frame: pd.DataFrame, key: str, value: str, title: str) -> None:
    shown = frame.head(TOP_BARS)
    rest = frame.iloc[TOP_BARS:][value].sum() if len(frame) > TOP_BARS else 0
    names = [str(k) for k in shown[key]] + ([f"{len(frame) - TOP_BARS} more"] if rest else [])
    values = [float(v) for v in shown[value]] + ([float(rest)] if rest else [])
    unit, size = plots.bytes_unit(max(values, default=0.0))
    ax.barh(names[::-1], [v / size for v in values[::-1]], color="tab:blue")
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel(f"bytes ({unit})")
    ax.tick_params(axis="y", labelsize="small")


def where_bytes(
    by_owner: pd.DataFrame,
    by_runner: pd.DataFrame,
    by_node: pd.DataFrame,
    by_state_key: pd.DataFrame,
) -> Figure:
    """Four panels: bytes by owner, runner, node (every checkpoint's size, or estimated from a
    sample: ``bytes_by(..., sample=N)``) and by top-level state key (estimated from a sample);
    a panel drawn from a sample says so in its title, and how large the sample is."""
    title = "Where the bytes are"
    if by_owner.empty:
        return plots._no_data(title, f"{plots.NO_DATA}: the store holds no checkpoint")
    fig = plots._figure(title, 2, height=3.4)
    fig.clear()
    fig.suptitle(title, fontsize="large", fontweight="bold")
    axes = fig.subplots(2, 2)
    _bars(axes[0][0], by_owner, "owner", "size_bytes", "by owner (threads' runner)")
    _bars(axes[0][1], by_runner, "runner", "size_bytes", "by runner" + _sampled(by_runner))
    _bars(axes[1][0], by_node, "node", "size_bytes", "by node" + _sampled(by_node))
    attrs = by_state_key.attrs
    sampled = f"{attrs.get('sampled', 0):,} of {attrs.get('population', 0):,}"
    if by_state_key.empty:
        axes[1][1].set_axis_off()
        axes[1][1].text(0.5, 0.5, "no state sampled", ha="center", va="center", color="grey")
    else:
        _bars(
            axes[1][1],
            by_state_key,
            "key",
            "estimated_bytes",
            f"by state key (estimated from {sampled} checkpoints)",
        )
    return fig


def _sampled(frame: pd.DataFrame) -> str:
    """A panel title's note that its bars are estimated from a sample, and how large."""
    attrs = frame.attrs
    if "sampled" not in attrs:
        return ""
    return f"\n(estimated from a sample of {attrs['sampled']:,} of {attrs['population']:,} checkpoints)"


def forecast_chart(frame: pd.DataFrame, limit: int | None = None) -> Figure:
    """Bytes and threads each day of a :func:`~durability.analyses.forecast` per policy, the
    size ``limit`` drawn and the day each policy crosses it written on the chart."""
    title = "Growth forecast"
    if frame.empty:
        return plots._no_data(title)
    days = int(frame.attrs.get("window", 28))
    fig = plots._figure(f"{title} (writes as in the last {days} days, by weekday)", 2, sharex=True)
    top, bottom = fig.axes
    largest = float(max(frame["size_bytes"].max(), limit or 0))
    unit, size = plots.bytes_unit(largest)
    for (policy, role), rows in frame.groupby(["policy", "role"], sort=False):
        style = vocabulary.policy_style(str(role))
        label = vocabulary.policy_role(str(policy), str(role))
        x = plots._utc(rows["day"])
        top.plot(x, rows["size_bytes"].to_numpy() / size, label=label, **style)
        bottom.plot(x, rows["threads"].to_numpy(), label=label, **style)
    top.set_ylabel(f"bytes ({unit})")
    top.set_ylim(0, largest / size * 1.08)
    said = ""
    if limit is not None:
        top.axhline(
            limit / size, color="tab:red", linewidth=1, label=f"limit {format_bytes(limit)}"
        )
        said = "; ".join(
            f"{vocabulary.policy_role(p, str(frame[frame.policy == p].role.iloc[0]))} "
            + (f"crosses it on {day:%Y-%m-%d}" if day is not None else "stays under it")
            for p, day in crossing(frame, limit).items()
        )
        said = "\n" + textwrap.fill(f"limit {format_bytes(limit)}: {said}", 110)
    top.set_title(f"Bytes held{said}", fontsize="medium")
    bottom.set_title("Threads held")
    plots._count_axis(bottom, "threads")
    _legend_below(fig, top)
    plots._date_axis(bottom, "day (UTC)")
    return fig


def readiness_chart(by_owner: pd.DataFrame) -> Figure:
    """Threads per owner a restore from the plane brings back whole, partly, or not at all;
    the bytes it would lose written beside each bar."""
    title = "Restore readiness: if this disk died now"
    if by_owner.empty:
        return plots._no_data(title, f"{plots.NO_DATA}: the store holds no thread")
    fig = plots._figure(title, height=max(2.4, 0.45 * len(by_owner) + 1.2))
    ax = fig.axes[0]
    names = [str(o) for o in by_owner["owner"]][::-1]
    left = None
    for answer in RESTORABLE:
        counts = by_owner[answer].to_numpy()[::-1]
        ax.barh(names, counts, left=left, color=RESTORE_COLOURS[answer], label=answer)
        left = counts if left is None else left + counts
    for y, (total, lost) in enumerate(
        zip(
            by_owner["threads"].to_numpy()[::-1],
            by_owner["lost_bytes"].to_numpy()[::-1],
            strict=True,
        )
    ):
        if lost:
            ax.text(total, y, f"  {format_bytes(int(lost))} lost", va="center", fontsize="small")
    ax.set_xlabel("threads")
    ax.set_xlim(0, float(by_owner["threads"].max()) * 1.35)
    ax.set_title("by owner: what a restore from the plane brings back")
    _legend_below(fig, ax)
    return fig


def backtest_chart(result: Backtest) -> Figure:
    """Bytes held after each replayed sweep per policy, and the conversations each policy cut
    between two turns; the replay's caveat is written on the chart."""
    frame = result.days
    title = "Retention backtest: the last days replayed"
    if frame.empty:
        return plots._no_data(title)
    fig = plots._figure(title, 2, sharex=True)
    top, bottom = fig.axes
    unit, size = plots.bytes_unit(float(frame["size_bytes"].max()))
    groups = list(frame.groupby(["policy", "role"], sort=False))
    width = 0.8 / max(1, len(groups))
    for index, ((policy, role), rows) in enumerate(groups):
        style = vocabulary.policy_style(str(role))
        label = vocabulary.policy_role(str(policy), str(role))
        x = plots._utc(rows["day"])
        top.plot(x, rows["size_bytes"].to_numpy() / size, label=label, **style)
        offset = (index - (len(groups) - 1) / 2) * width
        bottom.bar(
            x + _days(offset),
            rows["cut_conversations"].to_numpy(),
            width=width,
            color=style["color"],
            label=label,
        )
    note = str(frame.attrs.get("caveat", ""))
    if frame.attrs.get("longer_than_in_force"):
        note = "the proposed policy is longer than the one in force, and " + note
    top.set_title(
        "Bytes the store would have held after each daily sweep\n"
        + textwrap.fill(f"note: {note}", 110),
        fontsize="medium",
    )
    top.set_ylabel(f"bytes ({unit})")
    top.set_ylim(bottom=0)
    bottom.set_title("Conversations cut between two turns, per sweep")
    plots._count_axis(bottom, "conversations cut")
    _legend_below(fig, top)
    plots._date_axis(bottom, "sweep day (UTC)")
    return fig


def thin_vs_delete_chart(savings: pd.DataFrame, keep_latest: int = 1) -> Figure:
    """Bytes freed by the sweep under the policy in force (deleting the due threads) beside
    bytes freed by thinning every thread to its latest ``keep_latest`` checkpoints, a proposal
    that keeps each thread resumable (:func:`durability.sweep.thin.thin_vs_delete`'s frame).

    The sweep's bar is the whole store's (``attrs``); a frame of a sample of threads scales
    its thinning to the store and the bar and title say it is estimated from that sample.
    """
    title = "Delete or thin: the bytes each frees"
    info = savings.attrs
    if savings.empty:
        return plots._no_data(title, f"{plots.NO_DATA}: the store holds no thread")
    deleted = int(info.get("delete_frees", savings["delete_frees"].sum()))
    due = int(info.get("due_threads", (savings["delete_frees"] > 0).sum()))
    thinned = int(savings["thin_frees"].sum())
    sample, everyone = info.get("sample"), int(info.get("threads", len(savings)))
    thin_label = f"thin all to the latest {keep_latest}"
    if sample is not None and sample < everyone:
        thinned = round(thinned * everyone / max(sample, 1))
        thin_label += f" (estimated from a sample of {sample:,} of {everyone:,} threads)"
        title += f": thinning from a sample of {sample:,} threads"
    names = [
        vocabulary.policy_role(f"delete the {due:,} due threads", vocabulary.IN_FORCE),
        vocabulary.policy_role(thin_label, vocabulary.PROPOSED),
    ]
    unit, size = plots.bytes_unit(max(deleted, thinned, 1))
    fig = plots._figure(title, height=2.2)
    ax = fig.axes[0]
    colours = [vocabulary.policy_colour(vocabulary.IN_FORCE)]
    colours.append(vocabulary.policy_colour(vocabulary.PROPOSED))
    ax.barh(names[::-1], [thinned / size, deleted / size], color=colours[::-1])
    for y, freed in enumerate((thinned, deleted)):
        ax.text(freed / size, y, f" {format_bytes(freed)}", va="center", fontsize="small")
    ax.set_xlabel(f"bytes freed ({unit})")
    if not deleted and not thinned:
        ax.set_title("nothing to free: no thread is due and none has more history", color="grey")
    return fig


def _legend_below(fig: Figure, ax: Axes) -> None:
    """The legend of ``ax`` under the figure's axes, in one row: next to the data it names,
    over none of it."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncols=min(len(handles), 3),
            fontsize="small",
        )


def _days(fraction: float) -> Any:
    import numpy as np

    return np.timedelta64(int(fraction * 86_400), "s")


__all__ = ["RESTORE_COLOURS", "backtest_chart", "forecast_chart", "readiness_chart", "where_bytes"]
