"""ipywidgets views for JupyterLab: thin wiring of controls to frames, simulate, plots, sweep and restore.

Each view holds no logic of its own: a control's change calls the library function that
answers it and shows the result. Display a view with its ``.widget``; the child controls are
attributes (``planner.waiting.value = 14`` is what moving the slider does, ``panel.plan_button
.click()`` what pressing the button does), and so is the last result each view computed
(``.frame``, ``.figure``, ``.plan`` …), which is what tests and notebooks read. Key controls
carry stable CSS classes for browser tests:

* explorer: ``durability-explorer`` (the view), ``-thread``, ``-checkpoint``, ``-history``, ``-state``;
* planner: ``durability-retention`` (the view), ``-waiting``, ``-finished``, ``-now``,
  ``-summary``, ``-chart``, ``-table``;
* outbox: ``durability-outbox`` (the view), ``-chart``, ``-quarantined``, ``-release``,
  ``-refresh``, ``-status``;
* restore: ``durability-restore`` (the view), ``-thread``, ``-plan``, ``-plan-table``,
  ``-restore``, ``-runner``, ``-value``, ``-resume``, ``-status``.

* :class:`StoreExplorer`: pick a thread, see its history and the state of any checkpoint.
* :class:`RetentionPlanner`: waiting and finished sliders and a "now" date: what a sweep
  would delete (the rows of :func:`durability.sweep.plan_sweep`), a summary per horizon and a
  90-day simulation of the chosen values beside the current ones.
* :class:`OutboxMonitor`: the backlog chart, the quarantined rows and a button releasing them.
* :class:`RestorePanel`: plan a restore from the plane (dry run), apply it, then resume the run
  with a value.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability._extras import missing_extra

try:
    import ipywidgets as w
    import pandas as pd
except ModuleNotFoundError as exc:  # the notebook extra
    raise missing_extra(exc, "durability.widgets") from exc

from durability import frames, plots, simulate
from durability._util import redact_url
from durability.errors import DurabilityError
from durability.humanize import format_bytes
from durability.replication import describe_drains
from durability.restore import RestorePlan, RestoreResult, apply_restore, plan_restore
from durability.runs import NO_VALUE, Runner, RunResult, load_runner
from durability.settings import Settings, format_duration
from durability.sweep import HORIZONS, SweepPlan, plan_sweep

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from durability.replication.connection import Connection
    from durability.stores.base import Store

#: How many rows of a table a view shows (the whole frame stays on the attribute).
TABLE_ROWS = 500


# ---------------------------------------------------------------------------- display helpers


def _show(output: w.Output, *items: Any) -> None:
    """Replace what ``output`` shows; a figure is shown as its PNG.

    Outside an IPython kernel an ``Output`` captures nothing, so nothing is rendered there.
    """
    from IPython import get_ipython
    from IPython.display import display
    from matplotlib.figure import Figure

    if get_ipython() is None:
        return
    with output:
        output.clear_output(wait=True)
        for item in items:
            display(_png(item) if isinstance(item, Figure) else item)  # type: ignore[no-untyped-call]


def _png(fig: Figure) -> Any:
    """A figure as a PNG display object: renders in any frontend, whatever the backend."""
    import io

    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96)
    return Image(data=buffer.getvalue(), format="png")  # type: ignore[no-untyped-call]


def _table(frame: pd.DataFrame) -> Any:
    """A sortable, searchable table (:func:`durability.tables.html`) of the first
    :data:`TABLE_ROWS` rows, or a note when there are none."""
    from IPython.display import HTML

    from durability import tables

    if frame.empty:
        return HTML("<p><i>no rows</i></p>")  # type: ignore[no-untyped-call]
    return HTML(tables.html(frame.head(TABLE_ROWS)))  # type: ignore[no-untyped-call]


def _message(text: str, *, error: bool = False) -> str:
    colour = "#b00020" if error else "#1b5e20"
    return f'<p style="color:{colour}">{html.escape(text)}</p>'


def _button(description: str, css: str, **options: Any) -> w.Button:
    button = w.Button(description=description, **options)
    button.add_class(css)
    return button


def _guarded(status: w.HTML, action: Callable[[], None]) -> None:
    """Run ``action``; a refusal of the library is shown in ``status`` instead of raised."""
    try:
        action()
    except (DurabilityError, ValueError) as exc:  # JSON and argument errors are ValueErrors
        status.value = _message(f"{type(exc).__name__}: {exc}", error=True)


# ---------------------------------------------------------------------------- store explorer


class StoreExplorer:
    """Pick a thread (``.thread``) to see its history (``.history``) and a checkpoint's state.

    Attributes: ``threads_frame`` (``frames.threads``), ``frame`` (the picked thread's
    ``frames.checkpoints`` with states), ``state_value`` (the state of the checkpoint picked in
    ``.checkpoint``, default the latest).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.threads_frame = frames.threads(store)
        newest_first = self.threads_frame.sort_values("newest_at", ascending=False)
        ids = newest_first["thread_id"].astype(str).tolist()
        self.thread = w.Dropdown(options=ids, value=ids[0] if ids else None, description="thread")
        self.thread.add_class("durability-explorer-thread")
        self.checkpoint = w.Dropdown(options=[], description="checkpoint")
        self.checkpoint.add_class("durability-explorer-checkpoint")
        self.summary = w.HTML()
        self.history = w.Output()
        self.history.add_class("durability-explorer-history")
        self.state = w.Output()
        self.state.add_class("durability-explorer-state")
        self.frame = pd.DataFrame()
        self.state_value: Any = None
        self.thread.observe(lambda _: self._load_thread(), names="value")
        self.checkpoint.observe(lambda _: self._load_state(), names="value")
        self.widget = w.VBox(
            [
                self.thread,
                self.summary,
                w.HTML("<b>History</b> (write order)"),
                self.history,
                self.checkpoint,
                w.HTML("<b>State</b>"),
                self.state,
            ]
        )
        self.widget.add_class("durability-explorer")
        self._load_thread()

    def _load_thread(self) -> None:
        thread_id = self.thread.value
        if thread_id is None:
            self.summary.value = "<p><i>the store holds no thread</i></p>"
            return
        self.frame = frames.checkpoints(self.store, thread_id=thread_id, decode_state=True)
        row = self.threads_frame[self.threads_frame["thread_id"] == thread_id]
        self.summary.value = row.drop(columns=["thread_id"]).to_html(index=False, na_rep="")
        _show(self.history, _table(self.frame.drop(columns=["state"])))
        ids = self.frame["checkpoint_id"].astype(str).tolist()[::-1]  # latest first
        self.checkpoint.options = ids
        self.checkpoint.value = ids[0] if ids else None
        self._load_state()

    def _load_state(self) -> None:
        picked = self.frame[self.frame["checkpoint_id"] == self.checkpoint.value]
        self.state_value = picked["state"].iloc[-1] if len(picked) else None
        text = json.dumps(self.state_value, indent=2, default=repr, ensure_ascii=False)
        _show(self.state, w.HTML(f"<pre>{html.escape(text)}</pre>"))


# ---------------------------------------------------------------------------- retention planner


def _days(value: timedelta) -> int:
    return max(1, round(value.total_seconds() / 86_400))


class RetentionPlanner:
    """Sliders for the two retention values and the sweep's "now": what a sweep would delete.

    ``.waiting`` and ``.finished`` are in days, ``.now`` a date (the time of day of ``now``
    is kept). Every change recomputes, for ``Policy(waiting, finished)``:

    * ``plan``: :func:`durability.sweep.plan_sweep` with settings carrying those values (the
      same code path as the sweep); ``frame`` its rows, ``deletes`` the rows it deletes
      (shown in ``.table``); ``.summary`` the threads and bytes deleted and kept per horizon.
      A finished thread's due time is fixed at its mark, so the finished value moves only
      marks made after it is in force.
    * ``daily``: :func:`durability.simulate.daily` over ``days`` days from now for the chosen
      and the current values, and ``figure``: its :func:`durability.plots.sweep_timeline`
      (in ``.chart``); the simulation applies the finished value to every mark.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        now: datetime | None = None,
        *,
        days: int = 90,
    ) -> None:
        self.store = store
        self.settings = settings or store.settings
        self.current = simulate.Policy.from_settings(self.settings)
        self.days = days
        start = (now or store.clock()).astimezone(UTC)
        self._time_of_day = start.timetz()
        self.threads_frame = frames.threads(store, start)
        self._threads_at = start
        waiting, finished = _days(self.current.waiting), _days(self.current.finished)
        self.waiting = w.IntSlider(
            value=waiting,
            min=1,
            max=max(90, 2 * waiting),
            description="waiting (days)",
            continuous_update=False,
        )
        self.waiting.add_class("durability-retention-waiting")
        self.finished = w.IntSlider(
            value=finished,
            min=1,
            max=max(30, 2 * finished),
            description="finished (days)",
            continuous_update=False,
        )
        self.finished.add_class("durability-retention-finished")
        self.now = w.DatePicker(value=start.date(), description="now")
        self.now.add_class("durability-retention-now")
        self.summary = w.HTML()
        self.summary.add_class("durability-retention-summary")
        self.chart = w.Output()
        self.chart.add_class("durability-retention-chart")
        self.table = w.Output()
        self.table.add_class("durability-retention-table")
        self.plan: SweepPlan | None = None
        self.frame = pd.DataFrame()
        self.deletes = pd.DataFrame()
        self.daily = pd.DataFrame()
        self.figure: Figure | None = None
        for control in (self.waiting, self.finished, self.now):
            control.observe(lambda _: self.update(), names="value")
        style = {"description_width": "110px"}
        for control in (self.waiting, self.finished, self.now):
            control.style = style
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

    def update(self) -> None:
        """Recompute the plan, the summary, the simulation and the chart for the controls."""
        policy, when = self.policy, self.when
        if when != self._threads_at:  # which parks and leases are live depends on "now"
            self.threads_frame, self._threads_at = frames.threads(self.store, when), when
        self.plan = plan_sweep(self.store, policy.settings(self.settings), when)
        self.frame = self.plan.to_frame()
        self.deletes = self.frame[self.frame["action"] == "delete"].reset_index(drop=True)
        self.summary.value = _plan_summary(self.plan, self.frame, policy, self.current)
        compared = [policy] if policy == self.current else [policy, self.current]
        self.daily = simulate.daily(self.threads_frame, compared, when, self.days)
        self.figure = plots.sweep_timeline(
            self.daily, policy=policy.label, in_force=self.current.label
        )
        _show(self.chart, self.figure)
        _show(self.table, _table(self.deletes))


def _plan_summary(
    plan: SweepPlan, frame: pd.DataFrame, policy: simulate.Policy, current: simulate.Policy
) -> str:
    """The plan's counts per horizon as an HTML table (``plan.summary()``, kept = not deleted)."""
    summary = plan.summary()
    going = summary["delete"]
    rows = []
    for horizon in HORIZONS:
        of = frame[frame["horizon"] == horizon]
        kept = of[of["action"] != "delete"]
        counts = summary["counts"][horizon]
        rows.append(
            f"<tr><td>{horizon}</td><td>{going[horizon]['threads']:,}</td>"
            f"<td>{plots.human_bytes(going[horizon]['size_bytes'])}</td>"
            f"<td>{len(kept):,}</td><td>{plots.human_bytes(kept['size_bytes'].sum())}</td>"
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


class OutboxMonitor:
    """The outbox's backlog chart (``.chart``), its quarantined rows (``.quarantined``) and a
    button putting them back in the outbox (``.release_button``, :meth:`Store.release`).

    Release asks first: ``.release_button`` shows what would go back (rows, bytes, projects)
    and whether a drain is running to send them, and ``.confirm_button`` releases (``.cancel_button``
    does not). Attributes: ``backlog_frame`` (``frames.backlog``), ``figure``
    (``plots.backlog``), ``outbox_frame`` (``frames.outbox``), ``quarantined_frame`` (its
    quarantined rows).
    """

    def __init__(self, store: Store, *, freq: str = "1h") -> None:
        self.store = store
        self.freq = freq
        self.chart = w.Output()
        self.chart.add_class("durability-outbox-chart")
        self.quarantined = w.Output()
        self.quarantined.add_class("durability-outbox-quarantined")
        self.release_button = _button(
            "Release quarantined rows", "durability-outbox-release", button_style="warning"
        )
        self.confirm_button = _button(
            "Confirm release", "durability-outbox-confirm", button_style="danger"
        )
        self.cancel_button = _button("Cancel", "durability-outbox-cancel")
        self.confirm = w.HBox([self.confirm_button, self.cancel_button])
        self.confirm.layout.display = "none"
        self.refresh_button = _button("Refresh", "durability-outbox-refresh")
        self.status = w.HTML()
        self.status.add_class("durability-outbox-status")
        self.backlog_frame = pd.DataFrame()
        self.outbox_frame = pd.DataFrame()
        self.quarantined_frame = pd.DataFrame()
        self.figure: Figure | None = None
        self.release_button.on_click(lambda _: _guarded(self.status, self.ask_release))
        self.confirm_button.on_click(lambda _: _guarded(self.status, self.release))
        self.cancel_button.on_click(lambda _: _guarded(self.status, self.cancel))
        self.refresh_button.on_click(lambda _: _guarded(self.status, self.refresh))
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
        self.backlog_frame = frames.backlog(self.store, self.freq)
        self.figure = plots.backlog(self.backlog_frame)
        self.outbox_frame = frames.outbox(self.store)
        state = self.outbox_frame["state"].astype("string")
        self.quarantined_frame = self.outbox_frame[state == "quarantined"].reset_index(drop=True)
        self.release_button.disabled = self.quarantined_frame.empty
        _show(self.chart, self.figure)
        _show(self.quarantined, _table(self.quarantined_frame))

    def ask_release(self) -> None:
        """Say what a release would put back (rows, bytes) and who would send it; ask to confirm."""
        frame = self.quarantined_frame
        projects = sorted(str(p) for p in frame["project_id"].unique())
        size = format_bytes(int(frame["size_bytes"].sum()))
        self.status.value = _message(
            f"release {len(frame)} row(s), {size}, of project(s) "
            f"{', '.join(repr(p) for p in projects)} back into the outbox? "
            f"{describe_drains(self.store, projects)} The backlog of past days does not change."
        )
        self.confirm.layout.display = "flex"

    def cancel(self) -> None:
        """Keep the rows quarantined."""
        self.confirm.layout.display = "none"
        self.status.value = _message("nothing released")

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
        self.status.value = _message(f"released {released} row(s) back into the outbox")


# ---------------------------------------------------------------------------- restore panel


class RestorePanel:
    """Restore a thread from the plane, then resume its run: plan (dry run), Restore, Resume.

    ``.thread_id`` names the thread; setting it (or ``.plan_button``) runs
    :func:`durability.restore.plan_restore` (reads only) and shows ``plan.to_frame()`` in
    ``.plan_table``; ``.restore_button`` applies
    that plan (:func:`durability.restore.apply_restore`; ``.overwrite`` replaces a local copy);
    ``.resume_button`` resumes the run with ``.resume_value`` (JSON; empty: no value) through
    the runner (``runner=``: a :class:`~durability.runs.Runner` or ``module:attr``, else the
    ``.runner`` text); a run that completed is never resumed: Resume says so and
    ``.fork_button`` branches a new thread from its last step instead. ``connection`` is the plane connection (default: the store's active
    one). Refusals show in ``.status``. Attributes: ``plan``, ``plan_frame``, ``result``
    (the :class:`~durability.restore.RestoreResult`), ``run_result``.
    """

    def __init__(
        self,
        store: Store,
        connection: Connection | None = None,
        *,
        runner: Runner | str | None = None,
    ) -> None:
        self.store = store
        self.connection = connection
        self._runner = runner if isinstance(runner, Runner) else None
        self.thread_id = w.Text(
            description="thread id", placeholder="the thread to restore", continuous_update=False
        )
        self.thread_id.add_class("durability-restore-thread")
        target = "the store's active connection" if connection is None else connection.target
        self.plane = w.HTML(f"<p>plane: <code>{html.escape(redact_url(target))}</code></p>")
        self.plan_button = _button("Plan restore (dry run)", "durability-restore-plan")
        self.overwrite = w.Checkbox(value=False, description="overwrite a local copy")
        self.restore_button = _button(
            "Restore", "durability-restore-restore", button_style="primary", disabled=True
        )
        self.plan_table = w.Output()
        self.plan_table.add_class("durability-restore-plan-table")
        self.runner = w.Text(
            value=runner.name if isinstance(runner, Runner) else (runner or ""),
            description="runner",
            placeholder="module:attr",
            disabled=isinstance(runner, Runner),
        )
        self.runner.add_class("durability-restore-runner")
        self.resume_value = w.Textarea(description="value", placeholder='{"approved": true}')
        self.resume_value.add_class("durability-restore-value")
        self.resume_button = _button("Resume", "durability-restore-resume", button_style="success")
        self.fork_button = _button("Fork", "durability-restore-fork")
        self.status = w.HTML()
        self.status.add_class("durability-restore-status")
        self.plan: RestorePlan | None = None
        self.plan_frame = pd.DataFrame()
        self.result: RestoreResult | None = None
        self.run_result: RunResult | None = None
        self.plan_button.on_click(lambda _: _guarded(self.status, self.make_plan))
        self.restore_button.on_click(lambda _: _guarded(self.status, self.apply))
        self.resume_button.on_click(lambda _: _guarded(self.status, self.resume))
        self.fork_button.on_click(lambda _: _guarded(self.status, self.fork))
        self.thread_id.observe(lambda _: self._thread_changed(), names="value")
        self.widget = w.VBox(
            [
                self.plane,
                w.HBox([self.thread_id, self.plan_button]),
                self.plan_table,
                w.HBox([self.restore_button, self.overwrite]),
                w.HBox([self.runner, self.resume_value, self.resume_button, self.fork_button]),
                self.status,
            ]
        )
        self.widget.add_class("durability-restore")

    def _forget_plan(self) -> None:
        """A plan is for one thread: another id needs a new plan before Restore."""
        self.plan = None
        self.restore_button.disabled = True

    def _thread_changed(self) -> None:
        """A new thread id is planned at once (a dry run), so Restore applies what is shown."""
        self._forget_plan()
        if self.thread_id.value.strip():
            _guarded(self.status, self.make_plan)

    def make_plan(self) -> None:
        """Plan the restore of ``.thread_id`` (nothing is written) and show it."""
        self._forget_plan()
        thread_id = self.thread_id.value.strip()
        self.plan = plan_restore(self.store, thread_id, self.connection)
        self.plan_frame = self.plan.to_frame()
        _show(self.plan_table, _table(self.plan_frame))
        notes = [*self.plan.warnings]
        if self.plan.local is not None:
            notes.append(f"the store already holds the thread: {self.plan.local.describe()}")
        if self.plan.refusal is not None:
            self.status.value = _message(f"cannot restore: {self.plan.refusal}", error=True)
        elif self.plan.empty:
            self.status.value = _message(f"the plane holds nothing of {thread_id!r}", error=True)
        else:
            self.restore_button.disabled = False
            park = "" if self.plan.park is None else " and its pending park"
            self.status.value = _message(
                f"would restore {len(self.plan.checkpoints)} checkpoint(s){park} "
                f"({self.plan.source}); press Restore to write them. " + " ".join(notes)
            )

    def apply(self) -> None:
        """Write the plan shown (refused if the store changed so that it no longer applies)."""
        if self.plan is None:
            self.status.value = _message("plan the restore first", error=True)
            return
        self.result = apply_restore(self.store, self.plan, overwrite=self.overwrite.value)
        self.restore_button.disabled = True
        park = (
            ""
            if self.result.park is None
            else (f"; parked until {self.result.park.deadline:%Y-%m-%d %H:%M} UTC")
        )
        self.status.value = _message(
            f"restored {len(self.result.checkpoints)} checkpoint(s) of {self.plan.thread_id!r}"
            f"{park}; resume it with a value below"
        )

    def resume(self) -> None:
        """Resume the thread's run with the JSON value (none when the text is empty); a run
        that completed is not resumed: the status says so and offers Fork."""
        thread_id = self.thread_id.value.strip()
        latest = self.store.latest(thread_id) if thread_id else None
        if latest is not None and latest.is_run_end and latest.status == "completed":
            self.status.value = _message(
                f"not resumed: the run {latest.run_id} on {thread_id!r} completed, and a "
                "completed run is never resumed; press Fork to run it again on a new thread "
                "from its last step"
            )
            return
        text = self.resume_value.value.strip()
        value = NO_VALUE if not text else json.loads(text)
        self.run_result = self._load_runner().resume(
            self.store, thread_id, value, connection=self.connection
        )
        self.status.value = _message(
            f"run {self.run_result.run_id} on {self.run_result.thread_id!r}: "
            f"{self.run_result.status}"
        )

    def fork(self) -> None:
        """Branch a new thread from the thread's last step and run it on from there."""
        thread_id = self.thread_id.value.strip()
        self.run_result = self._load_runner().fork(
            self.store, thread_id, connection=self.connection
        )
        self.status.value = _message(
            f"forked {thread_id!r} into {self.run_result.thread_id!r}: run "
            f"{self.run_result.run_id} {self.run_result.status}"
        )

    def _load_runner(self) -> Runner:
        return self._runner or load_runner(self.runner.value.strip())


__all__ = ["OutboxMonitor", "RestorePanel", "RetentionPlanner", "StoreExplorer"]
