"""The restore panel: plan a restore from the plane (dry run), apply it, resume or fork the run."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

import ipywidgets as w
import pandas as pd

from durability._util import redact_url
from durability.restore import RestorePlan, RestoreResult, apply_restore, plan_restore
from durability.runs import NO_VALUE, Runner, RunResult, load_runner
from durability.widgets._parts import button, guarded, message, show, table

if TYPE_CHECKING:
    from durability.replication.connection import Connection
    from durability.stores.base import Store


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
        self.plan_button = button("Plan restore (dry run)", "durability-restore-plan")
        self.overwrite = w.Checkbox(value=False, description="overwrite a local copy")
        self.restore_button = button(
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
        self.resume_button = button("Resume", "durability-restore-resume", button_style="success")
        self.fork_button = button("Fork", "durability-restore-fork")
        self.status = w.HTML()
        self.status.add_class("durability-restore-status")
        self.plan: RestorePlan | None = None
        self.plan_frame = pd.DataFrame()
        self.result: RestoreResult | None = None
        self.run_result: RunResult | None = None
        self.plan_button.on_click(lambda _: guarded(self.status, self.make_plan))
        self.restore_button.on_click(lambda _: guarded(self.status, self.apply))
        self.resume_button.on_click(lambda _: guarded(self.status, self.resume))
        self.fork_button.on_click(lambda _: guarded(self.status, self.fork))
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
            guarded(self.status, self.make_plan)

    def pick(self, thread_id: str) -> None:
        """Plan the restore of ``thread_id`` (what selecting it in a ``RowPicker`` does)."""
        if self.thread_id.value == thread_id:
            guarded(self.status, self.make_plan)
        else:
            self.thread_id.value = thread_id

    def make_plan(self) -> None:
        """Plan the restore of ``.thread_id`` (nothing is written) and show it."""
        self._forget_plan()
        thread_id = self.thread_id.value.strip()
        self.plan = plan_restore(self.store, thread_id, self.connection)
        self.plan_frame = self.plan.to_frame()
        show(self.plan_table, table(self.plan_frame))
        notes = [*self.plan.warnings]
        if self.plan.local is not None:
            notes.append(f"the store already holds the thread: {self.plan.local.describe()}")
        if self.plan.refusal is not None:
            self.status.value = message(f"cannot restore: {self.plan.refusal}", error=True)
        elif self.plan.empty:
            self.status.value = message(f"the plane holds nothing of {thread_id!r}", error=True)
        else:
            self.restore_button.disabled = False
            park = "" if self.plan.park is None else " and its pending park"
            self.status.value = message(
                f"would restore {len(self.plan.checkpoints)} checkpoint(s){park} "
                f"({self.plan.source}); press Restore to write them. " + " ".join(notes)
            )

    def apply(self) -> None:
        """Write the plan shown (refused if the store changed so that it no longer applies)."""
        if self.plan is None:
            self.status.value = message("plan the restore first", error=True)
            return
        self.result = apply_restore(self.store, self.plan, overwrite=self.overwrite.value)
        self.restore_button.disabled = True
        park = (
            ""
            if self.result.park is None
            else (f"; parked until {self.result.park.deadline:%Y-%m-%d %H:%M} UTC")
        )
        self.status.value = message(
            f"restored {len(self.result.checkpoints)} checkpoint(s) of {self.plan.thread_id!r}"
            f"{park}; resume it with a value below"
        )

    def resume(self) -> None:
        """Resume the thread's run with the JSON value (none when the text is empty); a run
        that completed is not resumed: the status says so and offers Fork."""
        thread_id = self.thread_id.value.strip()
        latest = self.store.latest(thread_id) if thread_id else None
        if latest is not None and latest.is_run_end and latest.status == "completed":
            self.status.value = message(
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
        self.status.value = message(
            f"run {self.run_result.run_id} on {self.run_result.thread_id!r}: "
            f"{self.run_result.status}"
        )

    def fork(self) -> None:
        """Branch a new thread from the thread's last step and run it on from there."""
        thread_id = self.thread_id.value.strip()
        self.run_result = self._load_runner().fork(
            self.store, thread_id, connection=self.connection
        )
        self.status.value = message(
            f"forked {thread_id!r} into {self.run_result.thread_id!r}: run "
            f"{self.run_result.run_id} {self.run_result.status}"
        )

    def _load_runner(self) -> Runner:
        return self._runner or load_runner(self.runner.value.strip())
