"""ipywidgets views for JupyterLab: thin wiring of controls to frames, simulate, plots, sweep and restore.

Each view holds no logic of its own: a control's change calls the library function that
answers it and shows the result. Display a view with its ``.widget``; the child controls are
attributes (``planner.waiting.value = 14`` is what moving the slider does, ``panel.plan_button
.click()`` what pressing the button does), and so is the last result each view computed
(``.frame``, ``.figure``, ``.plan`` …), which is what tests and notebooks read. Key controls
carry stable CSS classes for browser tests:

* explorer: ``durability-explorer`` (the view), ``-search``, ``-thread``, ``-next``,
  ``-checkpoint``, ``-history``, ``-state``;
* planner: ``durability-retention`` (the view), ``-waiting``, ``-finished``, ``-now``,
  ``-summary``, ``-chart``, ``-table``;
* outbox: ``durability-outbox`` (the view), ``-chart``, ``-quarantined``, ``-release``,
  ``-confirm``, ``-cancel``, ``-refresh``, ``-status``;
* restore: ``durability-restore`` (the view), ``-thread``, ``-plan``, ``-plan-table``,
  ``-restore``, ``-runner``, ``-value``, ``-resume``, ``-fork``, ``-status``;
* rows: ``durability-rows`` (the view), ``-search``, ``-sort``, ``-descending``,
  ``-previous``, ``-next``, ``-counter``, ``-header``, ``-list``.

* :class:`StoreExplorer`: search thread ids by prefix (a page at a time), see a thread's
  history and the state of any checkpoint.
* :class:`RetentionPlanner`: waiting and finished sliders and a "now" date: what a sweep
  would delete (the rows of :func:`durability.sweep.plan_sweep`), a summary per horizon and a
  90-day simulation of the chosen values beside the current ones.
* :class:`OutboxMonitor`: the backlog chart, the quarantined rows and a button releasing them.
* :class:`RestorePanel`: plan a restore from the plane (dry run), apply it, then resume the run
  with a value.
* :class:`RowPicker`: a paged, sortable, searchable table of a frame's rows; selecting one
  drives the views that act on it (``picker.on_select(lambda row: explorer.pick(row.thread_id))``,
  or the restore panel's ``thread_id``).
"""

from __future__ import annotations

import dataclasses
import html
import json
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from durability._extras import needs_extra

with needs_extra("durability.widgets"):  # the notebook extra
    import ipywidgets as w
    import pandas as pd
    from IPython.display import HTML

from durability import frames, plots, simulate
from durability.humanize import format_bytes
from durability.model import ThreadRecord
from durability.replication import describe_drains
from durability.settings import Settings, format_duration
from durability.sweep import HORIZONS, SweepPlan, plan_sweep
from durability.widgets._parts import button, classed, guarded, message, show, table
from durability.widgets.erase import EraseControls
from durability.widgets.picking import RowPicker
from durability.widgets.restore import RestorePanel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from durability.stores.base import Store

#: Thread ids a picker shows at once (a page of a search, never every id).
PICKER_PAGE = 100


class StoreExplorer:
    """Pick a thread (``.thread``) to see its history (``.history``) and a checkpoint's state.

    The picker never lists every id: ``.search`` (a thread id prefix) asks the store for a page
    of :data:`PICKER_PAGE` ids (``store.scans.find_threads``), and ``.next_page`` for the page
    after it. Attributes: ``page`` (the ids shown), ``record`` (the picked thread's
    :class:`~durability.model.ThreadRecord`), ``frame`` (its ``frames.checkpoints`` with
    states), ``state_value`` (the state of the checkpoint picked in ``.checkpoint``, default the
    latest). ``erasing`` erases the picked thread after a preview and a confirmation.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.search = w.Text(
            description="search", placeholder="thread id prefix", continuous_update=False
        )
        self.search.add_class("durability-explorer-search")
        self.thread = w.Dropdown(options=[], description="thread")
        self.thread.add_class("durability-explorer-thread")
        self.next_page = button("Next page", "durability-explorer-next")
        self.checkpoint = w.Dropdown(options=[], description="checkpoint")
        self.checkpoint.add_class("durability-explorer-checkpoint")
        self.summary = w.HTML()
        self.history = w.Output()
        self.history.add_class("durability-explorer-history")
        self.state = w.Output()
        self.state.add_class("durability-explorer-state")
        self.page: list[str] = []
        self.record: ThreadRecord | None = None
        self.frame = pd.DataFrame()
        self.state_value: Any = None
        self.search.observe(lambda _: self.find(), names="value")
        self.next_page.on_click(lambda _: self.find(after=self.page[-1] if self.page else None))
        self.thread.observe(lambda _: self._load_thread(), names="value")
        self.checkpoint.observe(lambda _: self._load_state(), names="value")
        #: The Erase button and its confirmation (``.erasing.erase``, ``.confirm``, ``.cancel``).
        self.erasing = EraseControls(store, lambda: self.thread.value, self.find)
        self.widget = w.VBox(
            [
                w.HBox([self.search, self.thread, self.next_page]),
                self.summary,
                self.erasing.widget,
                w.HTML("<b>History</b> (write order)"),
                self.history,
                self.checkpoint,
                w.HTML("<b>State</b>"),
                self.state,
            ]
        )
        self.widget.add_class("durability-explorer")
        self.find()

    def find(self, *, after: str | None = None) -> None:
        """Show the page of ids starting with ``.search`` (after ``after``) and pick its first."""
        self.page = self.store.scans.find_threads(self.search.value, after=after, limit=PICKER_PAGE)
        self.next_page.disabled = len(self.page) < PICKER_PAGE
        self.thread.options = self.page
        self.thread.value = self.page[0] if self.page else None
        if not self.page:
            self._load_thread()

    def pick(self, thread_id: str) -> None:
        """Show the thread ``thread_id`` (what selecting it in a :class:`RowPicker` does): the
        search becomes its id, so the picker's page starts at it."""
        if self.search.value == thread_id:
            self.find()
        else:
            self.search.value = thread_id

    def _load_thread(self) -> None:
        thread_id = self.thread.value
        if thread_id is None:
            found = (
                "the store holds no thread"
                if not self.search.value
                else "no thread id starts with that"
            )
            self.summary.value = f"<p><i>{html.escape(found)}</i></p>"
            return
        self.frame = frames.checkpoints(self.store, thread_id=thread_id, decode_state=True)
        self.record = self.store.thread(thread_id)
        fields = {} if self.record is None else dataclasses.asdict(self.record)
        fields.pop("thread_id", None)
        self.summary.value = pd.DataFrame([fields]).to_html(index=False, na_rep="")
        show(self.history, table(self.frame.drop(columns=["state"])))
        ids = self.frame["checkpoint_id"].astype(str).tolist()[::-1]  # latest first
        self.checkpoint.options = ids
        self.checkpoint.value = ids[0] if ids else None
        self._load_state()

    def _load_state(self) -> None:
        picked = self.frame[self.frame["checkpoint_id"] == self.checkpoint.value]
        self.state_value = picked["state"].iloc[-1] if len(picked) else None
        text = json.dumps(self.state_value, indent=2, default=repr, ensure_ascii=False)
        show(self.state, w.HTML(f"<pre>{html.escape(text)}</pre>"))


# ---------------------------------------------------------------------------- retention planner


def _days(value: timedelta) -> int:
    return max(1, round(value.total_seconds() / 86_400))


class RetentionPlanner:
    """Sliders for the two retention values and the sweep's "now": what a sweep would delete.

    ``.waiting`` and ``.finished`` are in days, ``.now`` a date (the time of day of ``now``
    is kept). Every change recomputes, for ``Policy(waiting, finished)``:

    * ``plan``: :func:`durability.sweep.plan_sweep` with settings carrying those values (the
      same code path as the sweep); ``frame`` its rows (built when read), ``deletes`` the
      first ``shown`` rows it deletes (shown in ``.table``, which says how many of how many);
      ``.summary`` the threads and bytes deleted and kept per horizon, counted over the plan.
      A finished thread's due time is fixed at its mark, so the finished value moves only
      marks made after it is in force.
    * ``daily``: :func:`durability.simulate.daily` over ``days`` days from now for the chosen
      and the current values, and ``figure``: its :func:`durability.plots.sweep_timeline`
      (in ``.chart``); the simulation applies the finished value to every mark.

    ``threads`` (``frames.threads(store, now)``) and ``plan`` (``plan_sweep`` at ``now`` with
    ``settings``) are reused when the caller has them, instead of read again.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        now: datetime | None = None,
        *,
        days: int = 90,
        threads: pd.DataFrame | None = None,
        plan: SweepPlan | None = None,
        shown: int = 1000,
    ) -> None:
        self.store = store
        self.shown = shown
        self.settings = settings or store.settings
        self.current = simulate.Policy.from_settings(self.settings)
        self.days = days
        start = (now or store.clock()).astimezone(UTC)
        self._time_of_day = start.timetz()
        self.threads_frame = threads if threads is not None else frames.threads(store, start)
        self._threads_at = start
        waiting, finished = _days(self.current.waiting), _days(self.current.finished)
        slider = {"min": 1, "continuous_update": False}
        self.waiting = classed(
            w.IntSlider(
                value=waiting, max=max(90, 2 * waiting), description="waiting (days)", **slider
            ),
            "durability-retention-waiting",
        )
        self.finished = classed(
            w.IntSlider(
                value=finished, max=max(30, 2 * finished), description="finished (days)", **slider
            ),
            "durability-retention-finished",
        )
        self.now = classed(
            w.DatePicker(value=start.date(), description="now"), "durability-retention-now"
        )
        self.summary = classed(w.HTML(), "durability-retention-summary")
        self.chart = classed(w.Output(), "durability-retention-chart")
        self.table = classed(w.Output(), "durability-retention-table")
        self.plan: SweepPlan | None = plan
        self.deletes = pd.DataFrame()
        self.daily = pd.DataFrame()
        self.figure: Figure | None = None
        for control in (self.waiting, self.finished, self.now):
            control.observe(lambda _: self.update(), names="value")
            control.style = {"description_width": "110px"}
        self.widget = w.VBox(
            [
                w.HBox([self.waiting, self.finished, self.now]),
                self.summary,
                self.chart,
                w.HTML("<b>What the sweep would delete</b>"),
                self.table,
            ]
        )
        self.widget.add_class("durability-retention")
        self.update()

    @property
    def policy(self) -> simulate.Policy:
        """The values the sliders hold."""
        return simulate.Policy(
            timedelta(days=self.waiting.value), timedelta(days=self.finished.value)
        )

    @property
    def when(self) -> datetime:
        """The sweep's instant: the picked date at the time of day of ``now``."""
        picked: date = self.now.value or datetime.now(UTC).date()
        return datetime.combine(picked, self._time_of_day).astimezone(UTC)

    @property
    def frame(self) -> pd.DataFrame:
        """Every row of the current plan (built when read: a plan may hold millions)."""
        return self.plan.to_frame() if self.plan is not None else pd.DataFrame()

    def update(self) -> None:
        """Recompute the plan, the summary, the simulation and the chart for the controls."""
        policy, when = self.policy, self.when
        if when != self._threads_at:  # which parks and leases are live depends on "now"
            self.threads_frame, self._threads_at = frames.threads(self.store, when), when
        settings = policy.settings(self.settings)
        given = self.plan
        if given is None or given.now != when or given.settings != settings:
            self.plan = plan_sweep(self.store, settings, when)
        plan = cast(SweepPlan, self.plan)
        self.deletes = plan.to_frame(action="delete", limit=self.shown)
        self.summary.value = _plan_summary(plan, policy, self.current)
        compared = [policy] if policy == self.current else [policy, self.current]
        self.daily = simulate.daily(self.threads_frame, compared, when, self.days)
        self.figure = plots.sweep_timeline(
            self.daily, policy=policy.label, in_force=self.current.label
        )
        show(self.chart, self.figure)
        going = plan.summary()["total_delete"]["threads"]
        shown = [table(self.deletes)]
        if going > len(self.deletes):
            note = f"the first {len(self.deletes):,} of the {going:,} threads it deletes"
            shown.insert(0, HTML(f"<p><i>{note}</i></p>"))  # type: ignore[no-untyped-call]
        show(self.table, *shown)


def _plan_summary(plan: SweepPlan, policy: simulate.Policy, current: simulate.Policy) -> str:
    """The plan's counts per horizon as an HTML table (``plan.summary()``, kept = not deleted)."""
    summary = plan.summary()
    going = summary["delete"]
    groups = plan.groups().reset_index()
    rows = []
    for horizon in HORIZONS:
        kept = groups[(groups["horizon"] == horizon) & (groups["action"] != "delete")]
        counts = summary["counts"][horizon]
        rows.append(
            f"<tr><td>{horizon}</td><td>{going[horizon]['threads']:,}</td>"
            f"<td>{plots.human_bytes(going[horizon]['size_bytes'])}</td>"
            f"<td>{int(kept['threads'].sum()):,}</td>"
            f"<td>{plots.human_bytes(kept['size_bytes'].sum())}</td>"
            f"<td>{counts['spared']:,}</td><td>{counts['skipped']:,}</td></tr>"
        )
    total = summary["total_delete"]
    changed = "" if policy == current else f" (in force: {html.escape(current.label)})"
    return (
        f"<p>A sweep at <b>{plan.now:%Y-%m-%d %H:%M} UTC</b> with <b>{html.escape(policy.label)}"
        f"</b>{changed} would delete <b>{total['threads']:,}</b> of {summary['threads']:,} "
        f"threads ({plots.human_bytes(total['size_bytes'])}, {total['checkpoints']:,} "
        "checkpoints).</p>"
        "<table><tr><th>horizon</th><th>threads deleted</th><th>bytes deleted</th>"
        "<th>threads kept</th><th>bytes kept</th><th>spared (live)</th><th>skipped</th></tr>"
        + "".join(rows)
        + "</table><p><small>A finished thread's due time was fixed at its mark: the finished "
        f"value ({format_duration(policy.finished)}) moves marks made from now on; the chart "
        "applies it to every mark.</small></p>"
    )


# ---------------------------------------------------------------------------- outbox monitor


#: How many quarantined rows the outbox monitor shows (and a release puts back) at a time.
QUARANTINED_SHOWN = 1000


class OutboxMonitor:
    """The outbox's backlog chart (``.chart``), its quarantined rows (``.quarantined``) and a
    button putting them back in the outbox (``.release_button``, :meth:`Store.release`).

    Release asks first: ``.release_button`` shows what would go back (rows, bytes, projects)
    and whether a drain is running to send them, and ``.confirm_button`` releases (``.cancel_button``
    does not). Attributes: ``backlog_frame`` (``frames.backlog``), ``figure``
    (``plots.backlog``), ``quarantined_frame`` (the first :data:`QUARANTINED_SHOWN` quarantined
    rows, ``frames.outbox_rows``: never the whole outbox). ``backlog``: a ``frames.backlog``
    frame of this store at ``freq`` read just before, shown first instead of reading it again
    (**Refresh** and a release read it anew).
    """

    def __init__(
        self, store: Store, *, freq: str = "1h", backlog: pd.DataFrame | None = None
    ) -> None:
        self.store = store
        self.freq = freq
        self._read_backlog = backlog
        self.chart = w.Output()
        self.chart.add_class("durability-outbox-chart")
        self.quarantined = w.Output()
        self.quarantined.add_class("durability-outbox-quarantined")
        self.release_button = button(
            "Release quarantined rows", "durability-outbox-release", button_style="warning"
        )
        self.confirm_button = button(
            "Confirm release", "durability-outbox-confirm", button_style="danger"
        )
        self.cancel_button = button("Cancel", "durability-outbox-cancel")
        self.confirm = w.HBox([self.confirm_button, self.cancel_button])
        self.confirm.layout.display = "none"
        self.refresh_button = button("Refresh", "durability-outbox-refresh")
        self.status = w.HTML()
        self.status.add_class("durability-outbox-status")
        self.backlog_frame = pd.DataFrame()
        self.quarantined_frame = pd.DataFrame()
        self.figure: Figure | None = None
        self.release_button.on_click(lambda _: guarded(self.status, self.ask_release))
        self.confirm_button.on_click(lambda _: guarded(self.status, self.release))
        self.cancel_button.on_click(lambda _: guarded(self.status, self.cancel))
        self.refresh_button.on_click(lambda _: guarded(self.status, self.refresh))
        self.widget = w.VBox(
            [
                self.chart,
                w.HTML("<b>Quarantined rows</b> (the plane refused them and said why)"),
                self.quarantined,
                w.HBox([self.release_button, self.refresh_button]),
                self.confirm,
                self.status,
            ]
        )
        self.widget.add_class("durability-outbox")
        self.refresh()

    def refresh(self) -> None:
        """Read the backlog and the outbox again."""
        given, self._read_backlog = self._read_backlog, None
        self.backlog_frame = frames.backlog(self.store, self.freq) if given is None else given
        self.figure = plots.backlog(self.backlog_frame)
        self.quarantined_frame = frames.outbox_rows(
            self.store, "quarantined", limit=QUARANTINED_SHOWN
        )
        self.release_button.disabled = self.quarantined_frame.empty
        show(self.chart, self.figure)
        show(self.quarantined, table(self.quarantined_frame))

    def ask_release(self) -> None:
        """Say what a release would put back (rows, bytes) and who would send it; ask to confirm."""
        frame = self.quarantined_frame
        projects = sorted(str(p) for p in frame["project_id"].unique())
        size = format_bytes(int(frame["size_bytes"].sum()))
        self.status.value = message(
            f"release {len(frame)} row(s), {size}, of project(s) "
            f"{', '.join(repr(p) for p in projects)} back into the outbox? "
            f"{describe_drains(self.store, projects)} The backlog of past days does not change."
        )
        self.confirm.layout.display = "flex"

    def cancel(self) -> None:
        """Keep the rows quarantined."""
        self.confirm.layout.display = "none"
        self.status.value = message("nothing released")

    def release(self) -> None:
        """Put the quarantined rows shown back in the outbox; the next drain sends them again."""
        self.confirm.layout.display = "none"
        keys = [
            (str(t), int(s))
            for t, s in zip(
                self.quarantined_frame["thread_id"], self.quarantined_frame["seq"], strict=True
            )
        ]
        released = self.store.release(keys) if keys else 0
        self.refresh()
        self.status.value = message(f"released {released} row(s) back into the outbox")


__all__ = [
    "PICKER_PAGE",
    "OutboxMonitor",
    "RestorePanel",
    "RetentionPlanner",
    "RowPicker",
    "StoreExplorer",
]
