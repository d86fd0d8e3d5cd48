"""Running a run: its lease, its signals (stop, abort, timeout), the context a step sees, and
the rows it writes — a ``run_start``, one ``node`` row per step, a park, and one run end."""

from __future__ import annotations

import logging
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability.clock import as_utc
from durability.errors import (
    CodecError,
    ConfigError,
    LeaseLost,
    ParkRefused,
)
from durability.heartbeat import Heartbeat
from durability.model import (
    COMPLETED,
    FAILED,
    PARK_DEADLINE,
    RUN_METADATA,
    STEP_HITL_PAUSE,
    STEP_NODE,
    STEP_RUN_END,
    Checkpoint,
    Park,
)
from durability.runs.vocabulary import (
    MAX_ERROR_TEXT,
    NO_VALUE,
    PARKED,
    PAUSED,
    REASON_ABORTED,
    REASON_CANCELLED,
    REASON_ERROR,
    REASON_TIMEOUT,
    RUN_END_NODE,
)
from durability.settings import Retention, parse_duration
from durability.stores.base import Store

if TYPE_CHECKING:
    from durability.replication.connection import Connection
    from durability.runs.definitions import Runner, Step

log = logging.getLogger("durability.runs")


class RunControl:
    """Stop or abort a running run from any thread (cooperative: Python cannot kill a step).

    * :meth:`stop` (cancel): the step in flight finishes and is checkpointed, then the run ends
      failed with reason ``cancelled`` (or completed, when that was its last step); a step that
      calls ``ctx.check()`` stops at once.
    * :meth:`abort`: the step in flight is discarded (not checkpointed) even if it returns;
      the run ends failed with reason ``aborted``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None

    def stop(self) -> None:
        """Ask the run to stop after the step in flight."""
        with self._lock:
            self._reason = self._reason or REASON_CANCELLED

    def abort(self) -> None:
        """Ask the run to stop now, discarding the step in flight."""
        with self._lock:
            self._reason = REASON_ABORTED

    @property
    def requested(self) -> str | None:
        """``cancelled``, ``aborted`` or ``None``."""
        with self._lock:
            return self._reason


_LOST = "lease lost"


class Signals:
    """What may stop one execution: its control, its timeout, the loss of its lease."""

    def __init__(self, control: RunControl | None, store: Store, timeout: timedelta | None) -> None:
        self.control = control
        self.clock = store.clock
        self.deadline = None if timeout is None else store.clock() + timeout
        self.lost: LeaseLost | None = None

    def lease_lost(self, exc: LeaseLost) -> None:
        self.lost = exc

    def pending(self) -> str | None:
        """Why the run must stop now, or ``None`` (a lost lease first, then abort, stop, timeout)."""
        if self.lost is not None:
            return _LOST
        requested = self.control.requested if self.control is not None else None
        if requested is not None:
            return requested
        if self.deadline is not None and self.clock() >= self.deadline:
            return REASON_TIMEOUT
        return None


class _Interrupt(BaseException):
    """A step's ask (control flow, so a step's ``except Exception`` does not swallow it)."""

    def __init__(self, reason: str, context: Any, deadline: datetime | None) -> None:
        super().__init__(reason)
        self.reason, self.context, self.deadline = reason, context, deadline


class _Stop(BaseException):
    """``ctx.check()`` found a reason to stop the run now."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RunContext:
    """What a step receives besides the state.

    Attributes:
        store: the store the run lives in.
        thread_id, run_id: the run's thread and run.
        project_id: the project the run's rows belong to.
        runner: the runner's name.
        step, index: the step's name and position.
        resume_value: the answer this execution of the step was resumed with, else ``NO_VALUE``.
    """

    def __init__(self, execution: Execution, step: Step, index: int, resume_value: Any) -> None:
        run = execution.run
        self.store = run.store
        self.thread_id = run.thread_id
        self.run_id = run.run_id
        self.project_id = run.project_id
        self.runner = run.runner.name
        self.step = step.name
        self.index = index
        self.resume_value = resume_value
        self._signals = execution.signals
        self._answered = resume_value is NO_VALUE

    @property
    def resuming(self) -> bool:
        """Whether this execution of the step answers its earlier ask."""
        return self.resume_value is not NO_VALUE

    def now(self) -> datetime:
        """The store's clock."""
        return self.store.clock()

    def interrupt(
        self, reason: str, context: Any = None, *, deadline: datetime | timedelta | str | None
    ) -> Any:
        """Ask for an answer: park the run until someone resumes it with a value.

        When this execution of the step was resumed with a value, the first call returns it;
        every other call parks. A parked step runs again from its start on resume, so keep one
        ask per step. ``deadline`` (a time, or a duration from now: a timedelta or text such as
        ``"2d"``) must fit the thread's waiting retention; a park without one, past it, or in a
        store that cannot hold parks is refused and the run fails with that refusal as its error.
        """
        if not self._answered:
            self._answered = True
            return self.resume_value
        if isinstance(deadline, str):
            deadline = parse_duration(deadline, name="the ask's deadline")
        if isinstance(deadline, timedelta):
            deadline = self.now() + deadline
        raise _Interrupt(reason, context, None if deadline is None else as_utc(deadline))

    @property
    def cancelled(self) -> bool:
        """Whether the run has been asked to stop (stop, abort, timeout or a lost lease)."""
        return self._signals.pending() is not None

    def check(self) -> None:
        """Stop the step here when the run has been asked to stop (its output is discarded)."""
        reason = self._signals.pending()
        if reason is not None:
            raise _Stop(reason)


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a run stands after an operation.

    ``status`` is ``completed``, ``failed`` (``reason``: error, cancelled, aborted, timeout;
    ``error``: ``"<ExceptionClass>: <message>"`` for an error), ``parked`` (``park``: the
    pending ask) or ``paused`` (step mode stopped it between two steps). ``state`` is the run's
    state at that point; ``last_step`` the last step whose effect it holds. ``exception`` is the
    live exception of a failed step, in-process only.
    """

    runner: str
    thread_id: str
    run_id: str
    status: str
    state: Any
    last_step: str | None = None
    reason: str | None = None
    error: str | None = None
    park: Park | None = None
    thread_minted: bool = False
    checkpoint_id: str = ""
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """True unless the run failed."""
        return self.status != FAILED


@dataclass(slots=True)
class Run:
    """The identity and ownership of one run while an operation works on it."""

    runner: Runner
    store: Store
    deployment: Store
    thread_id: str
    run_id: str
    minted: bool
    owner: str
    retention: Retention | None
    project_id: str = ""

    @classmethod
    def peek(
        cls, runner: Runner, store: Store, deployment: Store | None, thread_id: str, run_id: str
    ) -> Run:
        """A placeholder until the thread is read under the lease (see ``Execution.adopt``)."""
        return cls(runner, store, deployment or store, thread_id, run_id, False, "", None)

    @property
    def metadata(self) -> dict[str, Any]:
        return {
            RUN_METADATA: {"minted": self.minted, "owner": self.owner, "kind": self.runner.kind}
        }

    def row(
        self,
        node_id: str,
        step: int,
        step_type: str,
        state: Any,
        *,
        parent_checkpoint_id: str | None = None,
        fork_of: dict[str, str] | None = None,
        **fields: Any,
    ) -> Checkpoint:
        metadata = self.metadata
        if fork_of is not None:
            metadata[RUN_METADATA]["fork_of"] = fork_of
        return Checkpoint(
            thread_id=self.thread_id,
            run_id=self.run_id,
            runner=self.runner.name,
            node_id=node_id,
            step=step,
            step_type=step_type,
            state=state,
            parent_checkpoint_id=parent_checkpoint_id,
            agent_path=self.runner.agent_path,
            metadata=metadata,
            project_id=self.project_id,
            **fields,
        )


class Execution:
    """One execution of a run under its lease: the step loop, the park and the run end."""

    def __init__(self, run: Run, signals: Signals, holder: str) -> None:
        self.run = run
        self.signals = signals
        self.holder = holder
        self.beat: Heartbeat | None = None

    def adopt(self, source: Checkpoint, project_id: str) -> Run:
        """Take the run's identity and ownership from a checkpoint read under the lease."""
        runner = self.run.runner
        facts = source.metadata.get(RUN_METADATA, {}) if isinstance(source.metadata, dict) else {}
        minted = bool(facts.get("minted"))
        self.run.run_id = source.run_id
        self.run.minted = minted
        self.run.owner = str(facts.get("owner") or runner._default_owner(minted))
        self.run.retention = runner._declared(self.run.store)
        self.run.project_id = project_id
        return self.run

    def begin(self) -> None:
        """Record the run start: unmark every thread the run may mark, record the retention."""
        run = self.run
        for ledger, thread in dict.fromkeys(
            [(run.store, run.thread_id), *run.runner._owned_threads(run)]
        ):
            ledger.unmark_finished(thread)
        run.store.record_run_start(
            run.thread_id, run_id=run.run_id, owner=run.owner, retention=run.retention
        )

    def write(self, cp: Checkpoint) -> Checkpoint:
        """Store ``cp`` if the lease is still ours (renewing it is the check)."""
        self._fence()
        return self.run.store.put(cp)

    def _fence(self) -> None:
        if self.signals.lost is not None:
            raise self._lost(self.signals.lost)
        assert self.beat is not None
        try:
            self.beat.beat_once()
        except LeaseLost as exc:
            self.signals.lease_lost(exc)
            raise self._lost(exc) from exc

    def _lost(self, exc: LeaseLost) -> LeaseLost:
        run = self.run
        return LeaseLost(
            f"run {run.run_id!r} of runner {run.runner.name!r} on thread {run.thread_id!r} stopped "
            f"without a run end: {exc}"
        )

    def execute(
        self, state: Any, *, position: int, value: Any = NO_VALUE, max_steps: int | None = None
    ) -> RunResult:
        """Run the steps after ``position``; the first gets ``value`` as its resume value.

        With ``max_steps``, pause after that many completed steps when more remain.
        """
        steps = self.run.runner.steps
        last = len(steps) if max_steps is None else position + max_steps  # last index to run
        written = ""  # the id of the last step row this execution wrote
        for index in range(position + 1, len(steps)):
            if index > last:
                return self.pause(state, position, written)
            reason = self._stop_reason()
            if reason is not None:
                return self.end(state, FAILED, position, reason=reason)
            step = steps[index]
            try:
                new_state = step.fn(state, RunContext(self, step, index, value))
            except _Interrupt as ask:
                reason = self._stop_reason()  # a run asked to stop never parks
                if reason is not None:
                    return self.end(state, FAILED, position, reason=reason)
                return self.park(state, step, index, ask, position)
            except _Stop:
                reason = self._stop_reason()
                assert reason is not None
                return self.end(state, FAILED, position, reason=reason)
            except Exception as exc:
                return self.end(state, FAILED, position, reason=REASON_ERROR, exception=exc)
            if self._stop_reason() == REASON_ABORTED:  # the step's output is discarded
                return self.end(state, FAILED, position, reason=REASON_ABORTED)
            try:
                written = self.write(
                    self.run.row(
                        step.name,
                        index,
                        STEP_NODE,
                        new_state,
                        node_input={} if value is NO_VALUE else {"resume": value},
                        node_output=_changes(state, new_state),
                    )
                ).checkpoint_id
            except CodecError as exc:  # the step returned a state no store can hold
                return self.end(state, FAILED, position, reason=REASON_ERROR, exception=exc)
            state, position, value = new_state, index, NO_VALUE
        return self.end(state, COMPLETED, position)

    def pause(self, state: Any, position: int, checkpoint_id: str) -> RunResult:
        """Stop between two steps in step mode: nothing is written, nothing is marked."""
        run = self.run
        log.info(
            "run %r on thread %r paused after step %r (step mode)",
            run.run_id,
            run.thread_id[:80],
            self._step_name(position),
        )
        return self._result(PAUSED, state, position, checkpoint_id)

    def _stop_reason(self) -> str | None:
        """Why the run must stop now (abort, stop, timeout), or ``None``; raise if the lease is lost."""
        reason = self.signals.pending()
        if reason == _LOST:
            assert self.signals.lost is not None
            raise self._lost(self.signals.lost)
        return reason

    def park(self, state: Any, step: Step, index: int, ask: _Interrupt, position: int) -> RunResult:
        """Park the run on ``ask``; a refused park fails the run with the refusal as its error."""
        run = self.run
        cp = run.row(step.name, index, STEP_HITL_PAUSE, state)
        if ask.deadline is not None:  # the plane keeps no park: the row carries its deadline
            facts = {**cp.metadata[RUN_METADATA], PARK_DEADLINE: ask.deadline.isoformat()}
            cp = cp.evolve(metadata={**cp.metadata, RUN_METADATA: facts})
        self._fence()
        try:
            stored, park = run.store.park(
                cp, deadline=ask.deadline, reason=ask.reason, context=ask.context
            )
        except (ParkRefused, CodecError) as exc:
            return self.end(state, FAILED, position, reason=REASON_ERROR, exception=exc)
        log.info(
            "run %r on thread %r parked at step %r: %s",
            run.run_id,
            run.thread_id[:80],
            step.name,
            ask.reason,
        )
        return self._result(PARKED, state, position, stored.checkpoint_id, park=park)

    def end(
        self,
        state: Any,
        status: str,
        position: int,
        *,
        reason: str | None = None,
        exception: BaseException | None = None,
    ) -> RunResult:
        """Write the run end and mark the threads the run owns finished."""
        run = self.run
        record: dict[str, Any] = {"run_status": status}
        if reason is not None:
            record["run_reason"] = reason
        error = None
        if exception is not None:
            error = f"{type(exception).__name__}: {exception}"[:MAX_ERROR_TEXT]
            record["run_error"] = error
        end_state = {**state, **record} if isinstance(state, dict) else state
        stored = self.write(
            run.row(
                RUN_END_NODE,
                position + 1,
                STEP_RUN_END,
                end_state,
                status=status,
                node_output=record,
            )
        )
        for ledger, thread in run.runner._owned_threads(run):
            ledger.mark_finished(thread)
        if status == FAILED:
            log.log(
                logging.WARNING if reason in (REASON_ERROR, REASON_TIMEOUT) else logging.INFO,
                "run %r of runner %r on thread %r failed (%s)%s",
                run.run_id,
                run.runner.name,
                run.thread_id[:80],
                reason,
                f": {error}" if error else "",
            )
        return self._result(
            status,
            state,
            position,
            stored.checkpoint_id,
            reason=reason,
            error=error,
            exception=exception,
        )

    def _result(
        self, status: str, state: Any, position: int, checkpoint_id: str, **outcome: Any
    ) -> RunResult:
        """The run's :class:`RunResult` after ``position`` (``outcome``: park, reason, error…)."""
        run = self.run
        return RunResult(
            runner=run.runner.name,
            thread_id=run.thread_id,
            run_id=run.run_id,
            status=status,
            state=state,
            last_step=self._step_name(position),
            thread_minted=run.minted,
            checkpoint_id=checkpoint_id,
            **outcome,
        )

    def _step_name(self, position: int) -> str | None:
        return None if position < 0 else self.run.runner.steps[position].name


def check_max_steps(max_steps: int | None, action: str) -> None:
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
    ):
        raise ConfigError(
            f"cannot {action} with max_steps={max_steps!r}: give a whole number of steps of at "
            "least 1, or None to run to the end"
        )


def project_of(source: Checkpoint, project_id: str | None, connection: Connection | None) -> str:
    """The project of a run continued from ``source``: the one given, else the source run's, else
    the connection's (a run started without a project then replicates through the connection
    that resumes it, instead of staying buffered with no connection to drain it)."""
    if project_id is not None:
        return project_id
    return source.project_id or (connection.project_id if connection is not None else "")


def _changes(before: Any, after: Any) -> Any:
    """What a step changed: the keys whose values differ, for dict states; else the new state."""
    if isinstance(before, dict) and isinstance(after, dict):
        with suppress(Exception):  # a value whose == raises: fall back to the whole state
            return {k: v for k, v in after.items() if k not in before or before[k] != v}
    return {"output": after}
