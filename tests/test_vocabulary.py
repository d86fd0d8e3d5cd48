"""One vocabulary and honest charts: status words, policy colours, date labels, people's units."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from analysis_frames import thread, threads_frame
from click.testing import CliRunner
from matplotlib.colors import to_rgba

import durability
from durability import frames, plots, vocabulary
from durability.cli import cli
from durability.humanize import format_age, format_bytes
from durability.model import Checkpoint
from durability.simulate import Policy, daily
from durability.tables import readable

T0 = datetime(2026, 12, 20, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def test_a_parked_run_is_one_word_everywhere() -> None:
    """The stored ``interrupted`` reads ``parked``, the run status frames.runs and the CLI use;
    the run statuses and the checkpoint words share their colours."""
    assert vocabulary.status_word("interrupted") == "parked"
    assert vocabulary.status_word("completed") == "completed"
    assert vocabulary.status_word(None) is None
    assert set(vocabulary.CHECKPOINT_STATUSES) <= set(vocabulary.RUN_STATUSES)
    assert frames.RUN_STATUSES == vocabulary.RUN_STATUSES
    assert vocabulary.status_colour("interrupted") == vocabulary.status_colour("parked")
    assert vocabulary.status_colour("parked") == "tab:orange"
    assert vocabulary.status_colour("something else") == vocabulary.OTHER_COLOUR
    colours = [vocabulary.STATUS_COLOURS[s] for s in vocabulary.RUN_STATUSES]
    assert len(set(colours)) == len(colours), "each status its own colour"
    assert vocabulary.IN_FORCE_COLOUR not in colours
    assert vocabulary.PROPOSED_COLOUR not in colours


def test_policy_roles_have_one_colour_and_say_which() -> None:
    assert vocabulary.policy_style("in force") == {"color": "black", "linestyle": "-"}
    assert vocabulary.policy_style("proposed") == {"color": "tab:purple", "linestyle": "--"}
    assert vocabulary.policy_role("waiting 7d", "proposed") == "proposed: waiting 7d"
    with pytest.raises(ValueError, match="use 'in force' or 'proposed'"):
        vocabulary.policy_colour("current")


def _lines(ax: object) -> dict[str, tuple[float, ...]]:
    return {str(line.get_label()): to_rgba(line.get_color()) for line in ax.get_lines()}  # type: ignore[attr-defined]


def test_every_policy_chart_draws_in_force_black_and_proposed_purple() -> None:
    rows = [thread(f"t{i}", newest_at=T0 - DAY * i, max_idle_gap=DAY * (i % 9)) for i in range(12)]
    threads = threads_frame(rows)
    black, purple = to_rgba("black"), to_rgba("tab:purple")
    curve = plots.retention_curve(threads, [2, 5, 10], current=DAY * 10, proposed="5d", now=T0)
    assert _lines(curve.axes[0])["in force: waiting 10d"] == black
    assert _lines(curve.axes[0])["proposed: waiting 5d"] == purple
    gaps = plots.idle_gaps(threads, "3d", in_force=Policy(DAY * 10, DAY))
    assert _lines(gaps.axes[0]) == {"in force: waiting 10d": black, "proposed: waiting 3d": purple}
    assert "proposed waiting 3d" in gaps.axes[0].get_title()
    in_force, proposed = Policy(DAY * 10, DAY), Policy(DAY * 3, DAY)
    timeline = plots.sweep_timeline(
        daily(threads, [in_force, proposed], T0, 14), in_force=in_force.label
    )
    lines = _lines(timeline.axes[0])
    assert lines[f"in force: {in_force.label}"] == black
    assert lines[f"proposed: {proposed.label}"] == purple
    assert timeline.axes[1].get_title().endswith(proposed.label), "bars show the proposal"


def test_date_labels_match_the_data_under_them() -> None:
    """A mostly-December axis reads its months on its ticks and its span in its label; no
    offset text names the last tick's month for the whole axis."""
    threads = threads_frame([thread("t", newest_at=T0, max_idle_gap=DAY)])
    fig = plots.sweep_timeline(daily(threads, [Policy(DAY * 30, DAY)], T0 - DAY * 25, 41))
    fig.canvas.draw()
    axis = fig.axes[1].xaxis
    assert axis.get_label_text() == "sweep day (UTC), 2026-11-25 to 2027-01-04"
    assert axis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
    assert labels
    assert all(label.split()[0] in ("Nov", "Dec", "Jan") for label in labels), labels


def test_flat_charts_say_why() -> None:
    """Threads no value deletes hold every byte: the bytes panel says so; a policy that deletes
    nothing in the window says so under its line."""
    rows = [thread("spared", newest_at=T0 - DAY * 90, size=10**6, park_deadline=T0 + DAY * 99)]
    rows += [thread(f"new{i}", newest_at=T0, size=10) for i in range(3)]
    threads = threads_frame(rows)
    curve = plots.retention_curve(threads, [1, 7, 30], now=T0)
    assert any(t.get_text().startswith("flat: every value") for t in curve.axes[1].texts)
    timeline = plots.sweep_timeline(daily(threads, [Policy(DAY * 400, DAY)], T0, 10))
    assert any(t.get_text().startswith("flat (") for t in timeline.axes[0].texts)


def test_people_read_sizes_and_ages_and_frames_keep_numbers() -> None:
    assert (format_bytes(1201756), format_age(2674507.3)) == ("1.1 MiB", "30d 22h")
    frame = pd.DataFrame(
        {
            "size_bytes": pd.array([1536, 0], dtype="int64"),
            "age": pd.to_timedelta(["3h", pd.NaT]),
            "at": pd.to_datetime([T0, T0], utc=True),
            "status": ["interrupted", "failed"],
            "checkpoints": [3, 4],
        }
    )
    shown = readable(frame)
    assert shown.to_dict("list") == {
        "size_bytes": ["1.5 KiB", "0 B"],
        "age": ["3h", ""],
        "at": ["2026-12-20 12:00", "2026-12-20 12:00"],
        "status": ["parked", "failed"],
        "checkpoints": [3, 4],
    }
    assert frame["size_bytes"].tolist() == [1536, 0], "the frame itself is untouched"


def test_cli_tables_read_in_peoples_units_and_json_keeps_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'units.db'}"
    with durability.open(url) as store:
        store.put(
            Checkpoint(thread_id="t1", node_id="ask", status="interrupted", state={"x": "y" * 3000})
        )
        size = store.latest("t1").size_bytes  # type: ignore[union-attr]
    listed = CliRunner().invoke(cli, ["threads", "list", url])
    assert listed.exit_code == 0, listed.output
    assert format_bytes(size) in listed.output
    assert str(size) not in listed.output
    shown = CliRunner().invoke(cli, ["threads", "show", url, "t1"])
    assert "parked" in shown.output
    assert "interrupted" not in shown.output
    as_json = CliRunner().invoke(cli, ["threads", "list", url, "--json"])
    assert f'"size_bytes": {size}' in as_json.output


def test_library_warnings_stay_out_of_stderr_unless_the_app_asks() -> None:
    """A library logs; with no handler configured nothing reaches Python's last resort."""
    handlers = logging.getLogger("durability").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
