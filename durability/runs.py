"""A small durable runner: ordered, named steps over a state, checkpointed on a thread.

A :class:`Runner` is a run *definition* (a name and its steps); it holds no store. Each
operation takes the store the run lives in, so the same definition serves a notebook, a worker
and ``durability resume --runner module:attr``::

    from datetime import timedelta
    from durability.runs import Runner

    def draft(state, ctx):
        return {**state, "draft": f"about {state['topic']}"}

    def approve(state, ctx):
        answer = ctx.interrupt("needs approval", {"draft": state["draft"]}, deadline=timedelta(days=2))
        return {**state, "approved": answer["approved"]}

    publish = Runner("publish", [draft, approve])
    result = publish.start(store, {"topic": "retention"})       # parks at approve
    publish.resume(store, result.thread_id, {"approved": True})  # any worker, exactly one wins

What a run writes on its thread, in write order (``seq``): a ``run_start`` row holding the input
state; one ``node`` row per completed step (its ``state`` the state after the step,
``node_input`` the resume value the step was given, ``node_output`` the keys it changed); a
``hitl_pause`` row and a park when a step interrupts (the state the step received, so the step
runs again with the answer); and exactly one ``run_end`` row per terminal — completed, or
failed with a reason (``error``, ``cancelled``, ``aborted``, ``timeout``) and the error text.
Every row carries the run's ownership facts in ``metadata["run"]``, so a run resumed on
another machine knows whether it owns its thread; a ``hitl_pause`` row also carries its park's
deadline there (``park_deadline``), so a restore re-creates the park with the declared deadline.
Every row also carries the run's ``project_id`` (the connection of that project replicates it)
and ``agent_path`` ``agent:<name>`` (``flow:<name>`` for a :class:`Flow`), from whose root the
plane reads the run's resource type: ``agent`` (its ``agent_id`` the registered plane id, else
the name), ``chain`` for a flow (seed 000).

The rules (DESIGN §9, seed 004 "Who marks a thread finished"):

* Step mode (``max_steps=`` on start and resume, :meth:`Runner.step` for one step) stops a run
  between two steps with no row written: it continues on the next resume or step.
* A running run holds a lease on its thread, renewed by a :class:`~durability.heartbeat.Heartbeat`
  and before every write (so a run that lost its lease never writes over the worker that took
  it); a lost lease stops the run with :class:`~durability.errors.LeaseLost`.
* Resuming reads the thread in ``seq`` order, all of it (never a node-index order, never a
  window of rows): a completed run is refused (:class:`~durability.errors.RunNotResumable`); a
  failed run resumes after its last real step; a parked one needs the answer and exactly one
  of any number of competing resumers gets it (:class:`~durability.errors.AlreadyResumed` for
  the others); a killed one resumes after its last completed step.
* A run that mints its thread marks it finished when it ends without a park, in its own store's
  ledger; a caller-supplied thread is taken out of the finished set at every start and never
  marked. A :class:`Flow` marks its own thread and the session threads it owns (those of
  :class:`AgentNode` steps whose template contains ``{flow_run_id}``, in the deployment's
  ledger) at every terminal, never at a pause, and unmarks them all whenever a run starts.

**Resume-time restore.** Resume, fork and stop look a thread up through :func:`locate_thread`
before anything else: a thread the local store has no checkpoint of is restored from the plane
when the store is connected (``connection=``, or an active connection of the store) and
``DURABILITY_RESTORE_FROM_PLANE`` allows it (seed 000 "Restore-anywhere"; see
:mod:`durability.restore`), and refused otherwise.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import string
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability import codec
from durability.clock import as_utc
from durability.errors import (
    AlreadyResumed,
    CodecError,
    ConfigError,
    LeaseHeld,
    LeaseLost,
    ParkRefused,
    RunError,
    RunNotResumable,
)
from durability.heartbeat import Heartbeat
from durability.model import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    STEP_FORK_ORIGIN,
    STEP_HITL_PAUSE,
    STEP_NODE,
    STEP_RUN_END,
    STEP_RUN_START,
    Checkpoint,
    Park,
)
from durability.settings import Retention, declare_retention, parse_duration
from durability.stores.base import Store, check_id, redact_url

if TYPE_CHECKING:
    from durability.replication.connection import Connection

log = logging.getLogger(__name__)

#: ``node_id`` of a run's first row, and the position before the first step.
START_NODE = "__start__"
#: ``node_id`` of a run end (fastaiagent's marker).
RUN_END_NODE = "run_end"
#: The ``metadata`` key holding a run's ownership facts.
RUN_METADATA = "run"
#: The key of a ``hitl_pause`` row's run facts holding its park's deadline (ISO 8601), so a
#: restore from the plane re-creates the park with the deadline the ask declared.
PARK_DEADLINE = "park_deadline"

#: Why a failed run ended.
REASON_ERROR = "error"
REASON_CANCELLED = "cancelled"
REASON_ABORTED = "aborted"
REASON_TIMEOUT = "timeout"

#: A run waiting on an ask (its park is pending).
PARKED = "parked"
#: A run stopped between two steps in step mode (``max_steps``): no run end, no park, no lease;
#: it continues on the next resume or step.
PAUSED = "paused"

#: Longest error text a run end keeps.
MAX_ERROR_TEXT = 4000

StepFn = Callable[[Any, "RunContext"], Any]


class _NoValue:
    def __repr__(self) -> str:
        return "NO_VALUE"


#: "No resume value given" (``None`` is a value).
NO_VALUE: Any = _NoValue()


# ---------------------------------------------------------------------------- definitions


@dataclass(frozen=True, slots=True)
class Step:
    """One named step: ``fn(state, ctx) -> new_state``."""

    name: str
    fn: StepFn


def _as_step(item: Step | tuple[str, StepFn] | StepFn) -> Step:
    if isinstance(item, Step):
        return item
    if isinstance(item, tuple):
        name, fn = item
        return Step(name, fn)
    if isinstance(item, AgentNode):
        return Step(item.name, item)
    if callable(item):
        return Step(getattr(item, "__name__", ""), item)
    raise ConfigError(
        f"cannot define a run with the step {item!r}: give a callable (state, ctx) -> state, "
        "a (name, callable) pair, a Step or an AgentNode"
    )


class Runner:
    """A run definition: a name and ordered, named steps over a state.

    Args:
        name: the runner's name, written to every checkpoint (``runner``); resume checks it.
        steps: callables ``(state, ctx) -> new_state`` (named by ``__name__``), ``(name, fn)``
            pairs, :class:`Step` or :class:`AgentNode` objects. Names must be unique.
        retention: the retention this runner declares for the threads it runs on, e.g.
            ``{"waiting": "14d", "finished": "2d"}``; checked against the store's platform
            values at every start (seed 004 "A thread's own retention").
        lease_ttl: how long the thread's lease lasts without renewal, on the store's clock (a
            timedelta or a duration such as ``"30s"``). A killed run can be resumed elsewhere
            once its lease has expired.
        heartbeat: seconds (real time) between lease renewals; default a third of ``lease_ttl``.
        timeout: the longest one execution (a start or a resume) may run, on the store's clock
            (a timedelta or a duration such as ``"10m"``); past it the run ends failed with
            reason ``timeout`` at its next check.
    """

    #: ``agent`` for a plain run; a :class:`Flow` is ``flow``.
    kind = "agent"

    @property
    def agent_path(self) -> str:
        """The ``agent_path`` of the runner's rows, ``<kind>:<name>``: the plane reads the run's
        resource type from it (``agent``; ``chain`` for a flow)."""
        return f"{self.kind}:{self.name}"

    def __init__(
        self,
        name: str,
        steps: Sequence[Step | tuple[str, StepFn] | StepFn],
        *,
        retention: Mapping[str, str | timedelta] | None = None,
        lease_ttl: timedelta | str = timedelta(seconds=30),
        heartbeat: float | None = None,
        timeout: timedelta | str | None = None,
    ) -> None:
        check_id(name, "runner name", action="define a runner")
        self.name = name
        self.steps = [_as_step(s) for s in steps]
        names = [s.name for s in self.steps]
        for step in self.steps:
            if not step.name or step.name in (START_NODE, RUN_END_NODE):
                raise ConfigError(
                    f"cannot define runner {name!r}: the step name {step.name!r} is reserved or "
                    "empty; name the step (a def, or a (name, fn) pair)"
                )
            if names.count(step.name) > 1:
                raise ConfigError(
                    f"cannot define runner {name!r}: two steps are named {step.name!r}; step "
                    "names identify checkpoints, so give each step its own name"
                )
        unknown = set(retention or {}) - {"waiting", "finished"}
        if unknown:
            raise ConfigError(
                f"cannot define runner {name!r}: retention keys {sorted(unknown)} are unknown; "
                "declare 'waiting' and/or 'finished'"
            )
        self.retention = {
            key: parse_duration(value, name=f"runner {name!r} {key} retention")
            for key, value in (retention or {}).items()
        }
        self.lease_ttl = parse_duration(lease_ttl, name=f"runner {name!r} lease_ttl")
        self.heartbeat = heartbeat if heartbeat is not None else self.lease_ttl.total_seconds() / 3
        self.timeout = (
            None if timeout is None else parse_duration(timeout, name=f"runner {name!r} timeout")
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {', '.join(s.name for s in self.steps)}>"

    # ------------------------------------------------------------------ operations

    def start(
        self,
        store: Store,
        state: Any = None,
        *,
        thread_id: str | None = None,
        owner: str | None = None,
        control: RunControl | None = None,
        deployment_store: Store | None = None,
        project_id: str = "",
        max_steps: int | None = None,
    ) -> RunResult:
        """Run the steps from the first, on a new run of ``thread_id`` (minted when ``None``).

        A minted thread is the run's: it is marked finished when the run ends without a park.
        A caller-supplied one is the caller's: taken out of the finished set now, never marked.
        Refused before anything is written when the declared retention exceeds the store's
        platform values, or when the thread holds a parked run (resume or stop that first).
        ``project_id`` stamps the run's rows: the connection of that project replicates them.
        ``max_steps`` runs in step mode: at most that many steps, then the run pauses
        (:data:`PAUSED`) if steps remain — no run end and no finished mark, as at a park.

        Returns the run's :class:`RunResult`: completed, failed (a step's exception is recorded
        in the run end, not raised), parked or paused. Raises
        :class:`~durability.errors.LeaseHeld` when another worker is running the thread,
        :class:`~durability.errors.LeaseLost` when the run lost its lease.
        """
        action = f"start runner {self.name!r}"
        _check_max_steps(max_steps, action)
        minted = thread_id is None
        thread = str(uuid.uuid4()) if thread_id is None else thread_id
        check_id(thread, "thread_id", action=action)
        if owner is not None:
            check_id(owner, "owner", action=action)
        check_id(project_id, "project_id", action=action, allow_empty=True)
        codec.dumps(state, path="state")  # refused here, before the thread is touched
        run = _Run(
            runner=self,
            store=store,
            deployment=deployment_store or store,
            thread_id=thread,
            run_id=str(uuid.uuid4()),
            minted=minted,
            owner=owner or self._default_owner(minted),
            retention=self._declared(store),
            project_id=project_id,
        )
        first = run.row(START_NODE, -1, STEP_RUN_START, state)
        with self._holding(run, control) as held:
            park = store.get_park(thread)
            if park is not None:
                raise RunError(
                    f"cannot start runner {self.name!r} on thread {thread!r}: it holds run "
                    f"{park.run_id!r} parked at step {park.node_id!r} ({park.reason!r}, deadline "
                    f"{park.deadline.isoformat()}); resume it with its answer or stop it first"
                )
            held.begin()
            held.write(first)
            return held.execute(state, position=-1, max_steps=max_steps)

    def resume(
        self,
        store: Store,
        thread_id: str,
        value: Any = NO_VALUE,
        *,
        control: RunControl | None = None,
        deployment_store: Store | None = None,
        connection: Connection | None = None,
        project_id: str | None = None,
        max_steps: int | None = None,
    ) -> RunResult:
        """Continue the thread's latest run: after its last completed step, or with ``value``.

        * parked: ``value`` answers the ask; the parked step runs again and its
          ``ctx.interrupt`` returns ``value``. Of competing resumers exactly one wins; the
          others get :class:`~durability.errors.AlreadyResumed`.
        * killed mid-step, lost its lease, or paused in step mode: resumes after its last
          completed step.
        * failed (any reason): resumes after its last real step, with the state it had there.
        * completed: refused with :class:`~durability.errors.RunNotResumable`.

        A ``value`` for a run that is not waiting on an ask is refused, and so is a parked run
        resumed without one. A thread the store has no checkpoint of is first restored from the
        plane when connected (``connection``, else the store's active connection) and
        ``DURABILITY_RESTORE_FROM_PLANE`` allows it (:func:`locate_thread`). The rows it writes
        belong to ``project_id``; by default the run's own project, else ``connection``'s.
        ``max_steps`` continues in step mode, as for :meth:`start` (see :meth:`step`).
        """
        action = f"resume thread {thread_id!r}"
        _check_max_steps(max_steps, action)
        if project_id is not None:
            check_id(project_id, "project_id", action=action, allow_empty=True)
        if value is not NO_VALUE:
            codec.dumps(value, path="value")  # refused here, before the park is claimed
        try:
            locate_thread(store, thread_id, action=action, connection=connection)
            hint = store.latest(thread_id)
            run_id = hint.run_id if hint is not None else ""
            with self._holding(
                _Run.peek(self, store, deployment_store, thread_id, run_id), control
            ) as held:
                source = self._resume_source(store, thread_id, action=action)
                held.adopt(source, _project_of(source, project_id, connection))
                parked = source.status == INTERRUPTED
                if parked and value is NO_VALUE:
                    raise RunNotResumable(
                        f"cannot resume run {source.run_id!r} on thread {thread_id!r}: it is waiting "
                        f"on an ask at step {source.node_id!r} ({source.interrupt_reason!r}); pass "
                        "the answer as value= (CLI: --value JSON)"
                    )
                if not parked and value is not NO_VALUE:
                    raise RunError(
                        f"cannot resume run {source.run_id!r} on thread {thread_id!r} with a value: it "
                        f"is not waiting on an ask (its last step is {source.node_id!r}, "
                        f"{source.step_type or 'step'}); resume it without a value"
                    )
                if parked:
                    pending = store.get_park(thread_id)
                    if pending is not None and store.claim_park(thread_id) is None:
                        raise AlreadyResumed(
                            f"cannot resume run {source.run_id!r} on thread {thread_id!r}: another "
                            "worker claimed its park first (exactly one resumer wins); see "
                            f"`durability runs {redact_url(store.url)}`"
                        )
                held.begin()
                return held.execute(
                    source.state, position=self._position(source), value=value, max_steps=max_steps
                )
        except LeaseHeld as exc:
            raise AlreadyResumed(
                f"cannot resume thread {thread_id!r}: another worker holds its lease (it resumed "
                "the run first, or it was killed and its lease has not expired yet); one worker "
                f"runs a thread at a time. {exc}"
            ) from exc

    def step(
        self,
        store: Store,
        thread_id: str,
        value: Any = NO_VALUE,
        **options: Any,
    ) -> RunResult:
        """Run the thread's latest run one step further, then pause it (step mode).

        :meth:`resume` with ``max_steps=1`` (same rules, same ``options``): the thread and the
        session threads a flow owns are taken out of the finished set when the step starts and
        not marked at the pause; the step that completes the run writes its run end and marks
        them as a terminal does. A parked run's step is its asked step, run with ``value``.
        """
        return self.resume(store, thread_id, value, max_steps=1, **options)

    def fork(
        self,
        store: Store,
        thread_id: str,
        checkpoint_id: str | None = None,
        *,
        new_thread_id: str | None = None,
        state: Any = NO_VALUE,
        control: RunControl | None = None,
        deployment_store: Store | None = None,
        connection: Connection | None = None,
        project_id: str | None = None,
    ) -> RunResult:
        """Branch a new thread from one of ``thread_id``'s checkpoints and run it on from there.

        The new thread starts with a ``fork_origin`` row (``parent_checkpoint_id`` = the source
        checkpoint) holding the source's state, or ``state`` when given; the run continues with
        the step after the source (the parked step again, for a ``hitl_pause`` source). Without
        ``checkpoint_id`` the source is the thread's last step that is not a run end, even of a
        completed run. A run end is not a step and cannot be forked from. A source thread the
        store has no checkpoint of is restored from the plane first, as for :meth:`resume`. The
        new thread's rows belong to ``project_id``; by default the source run's project, else
        ``connection``'s.
        """
        action = f"fork thread {thread_id!r}"
        if project_id is not None:
            check_id(project_id, "project_id", action=action, allow_empty=True)
        locate_thread(store, thread_id, action=action, connection=connection)
        if checkpoint_id is not None:
            source = store.get(thread_id, checkpoint_id)
            if source.is_run_end:
                before = _last_step_of(read_thread(store, thread_id), source.run_id, source.seq)
                raise RunError(
                    f"cannot fork from checkpoint {checkpoint_id!r} of thread {thread_id!r}: it is "
                    f"the run end of run {source.run_id!r}, not a step; fork from the step before "
                    f"it{f', checkpoint {before.checkpoint_id!r}' if before else ''}"
                )
        else:
            steps = [cp for cp in read_thread(store, thread_id) if not cp.is_run_end]
            if not steps:
                raise RunError(f"cannot {action}: it holds no step to fork from, only run ends")
            source = steps[-1]
        self._check_written_by_me(source, action=action)
        position = self._position(source)
        minted = new_thread_id is None
        new_thread = str(uuid.uuid4()) if new_thread_id is None else new_thread_id
        check_id(new_thread, "new_thread_id", action=action)
        start_state = source.state if state is NO_VALUE else state
        codec.dumps(start_state, path="state")
        run = _Run(
            runner=self,
            store=store,
            deployment=deployment_store or store,
            thread_id=new_thread,
            run_id=str(uuid.uuid4()),
            minted=minted,
            owner=self._default_owner(minted),
            retention=self._declared(store),
            project_id=_project_of(source, project_id, connection),
        )
        origin = run.row(
            START_NODE if position < 0 else self.steps[position].name,
            position,
            STEP_FORK_ORIGIN,
            start_state,
            parent_checkpoint_id=source.checkpoint_id,
            fork_of={"thread_id": thread_id, "checkpoint_id": source.checkpoint_id},
        )
        with self._holding(run, control) as held:
            held.begin()
            held.write(origin)
            return held.execute(start_state, position=position)

    def stop(
        self,
        store: Store,
        thread_id: str,
        *,
        abort: bool = False,
        deployment_store: Store | None = None,
        connection: Connection | None = None,
    ) -> RunResult:
        """End the thread's latest run from outside: a parked or killed run nobody is running.

        Writes its run end (failed, reason ``cancelled``, or ``aborted`` with ``abort=True``),
        drops its pending park and marks its threads as its ownership says. A run executing in
        some process is stopped through its :class:`RunControl` instead; here its live lease
        refuses the stop. A thread the store has no checkpoint of is restored from the plane
        first, as for :meth:`resume`.
        """
        action = f"stop thread {thread_id!r}"
        locate_thread(store, thread_id, action=action, connection=connection)
        hint = store.latest(thread_id)
        run_id = hint.run_id if hint is not None else ""
        peek = _Run.peek(self, store, deployment_store, thread_id, run_id)
        with self._holding(peek, None) as held:
            source = self._resume_source(store, thread_id, action=action, failed_ok=False)
            held.adopt(source, _project_of(source, None, connection))
            if source.status == INTERRUPTED:
                store.claim_park(thread_id)
            reason = REASON_ABORTED if abort else REASON_CANCELLED
            return held.end(source.state, FAILED, self._position(source), reason=reason)

    # ------------------------------------------------------------------ pieces

    def _default_owner(self, minted: bool) -> str:
        return f"{self.kind}:{self.name}" if minted else "caller"

    def _declared(self, store: Store) -> Retention | None:
        if not self.retention:
            return None
        return declare_retention(store.settings, **self.retention)

    def _owned_threads(self, run: _Run) -> list[tuple[Store, str]]:
        """The (ledger, thread) pairs this run marks finished at its terminal."""
        return [(run.store, run.thread_id)] if run.minted else []

    def _index(self, node_id: str, *, thread_id: str) -> int:
        for index, step in enumerate(self.steps):
            if step.name == node_id:
                return index
        raise RunNotResumable(
            f"cannot continue thread {thread_id!r}: its checkpoint is at step {node_id!r}, which "
            f"runner {self.name!r} does not define (its steps: "
            f"{', '.join(s.name for s in self.steps)}); use the runner definition that wrote it"
        )

    def _position(self, cp: Checkpoint) -> int:
        """The index of the last step whose effect ``cp.state`` holds (-1: none yet)."""
        if cp.node_id == START_NODE:
            return -1
        index = self._index(cp.node_id, thread_id=cp.thread_id)
        return index - 1 if cp.status == INTERRUPTED else index

    def _check_written_by_me(self, cp: Checkpoint, *, action: str) -> None:
        if cp.runner != self.name:
            raise RunNotResumable(
                f"cannot {action}: its run {cp.run_id!r} was written by runner {cp.runner!r}, not "
                f"{self.name!r}; use the runner that started it (durability resume --runner)"
            )

    def _resume_source(
        self, store: Store, thread_id: str, *, action: str, failed_ok: bool = True
    ) -> Checkpoint:
        """The checkpoint the thread's latest run continues from (seq order, whole thread)."""
        history = read_thread(store, thread_id)
        if not history:
            raise RunNotResumable(f"cannot {action}: it holds no checkpoint; start a run on it")
        latest = history[-1]
        self._check_written_by_me(latest, action=action)
        if not latest.is_run_end:
            return latest
        if latest.status != FAILED or not failed_ok:
            ended = "completed" if latest.status != FAILED else "failed"
            raise RunNotResumable(
                f"cannot {action}: its run {latest.run_id!r} already {ended} (run end "
                f"{latest.checkpoint_id!r} at {_iso(latest.created_at)}); "
                + (
                    "a completed run is never resumed: start a new run on the thread, or fork "
                    "it from one of its steps"
                    if ended == "completed"
                    else "resume it to continue after its last real step"
                )
            )
        source = _last_step_of(history, latest.run_id, latest.seq)
        if source is None:
            raise RunNotResumable(
                f"cannot {action}: its run {latest.run_id!r} failed before writing any step to "
                "resume from; start the run again"
            )
        return source

    @contextmanager
    def _holding(self, run: _Run, control: RunControl | None) -> Iterator[_Execution]:
        """Hold the thread's lease (heartbeat included) for the duration of the block."""
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        store = run.store
        store.acquire_lease(run.thread_id, holder, self.lease_ttl, run_id=run.run_id)
        execution = _Execution(run, _Signals(control, store, self.timeout), holder)
        beat = Heartbeat(
            store,
            run.thread_id,
            holder,
            ttl=self.lease_ttl,
            interval=self.heartbeat,
            on_lost=execution.signals.lease_lost,
        )
        execution.beat = beat
        try:
            with beat:
                yield execution
        finally:
            try:
                store.release_lease(run.thread_id, holder)
            except Exception as exc:  # the lease expires on its own; never hide the run's outcome
                log.warning("could not release the lease on thread %r: %s", run.thread_id[:80], exc)


class Flow(Runner):
    """A run whose :class:`AgentNode` steps run agents on session threads.

    Seed 004: a flow marks its own session thread (its thread, in its store's ledger) and every
    session thread it owns — an agent node whose template contains ``{flow_run_id}``, in the
    deployment's ledger (``deployment_store``, default the flow's store) — finished at every
    terminal (success, error, stop, abort), never at a pause, and takes them all out of the
    finished set whenever a run starts on the session (fresh, restart, resume, step).
    """

    kind = "flow"

    def _default_owner(self, minted: bool) -> str:
        return f"flow:{self.name}"

    def session_threads(self, run_id: str, thread_id: str) -> list[str]:
        """The session threads a flow run owns: its agent nodes' ``{flow_run_id}`` templates."""
        return [
            node.thread_for(flow_run_id=run_id, thread_id=thread_id)
            for node in (s.fn for s in self.steps)
            if isinstance(node, AgentNode) and node.owned
        ]

    def _owned_threads(self, run: _Run) -> list[tuple[Store, str]]:
        owned = self.session_threads(run.run_id, run.thread_id)
        return [(run.store, run.thread_id), *((run.deployment, t) for t in owned)]


class AgentNode:
    """A flow step that runs ``agent`` on a session thread named by ``session_thread``.

    The template may use ``{flow_run_id}`` (a thread per flow run: the flow owns it and marks
    it finished), ``{thread_id}`` (the flow's session thread: it lives across the session's
    runs, like a conversation) and ``{node}``. The agent runs on ``store`` (a per-run provider)
    or the flow's store, with the thread as a caller-supplied id, so the agent itself never
    marks it. The agent receives the flow's state and its final state is the step's result.
    When the agent parks, the flow parks on the same ask; resuming the flow answers the agent.
    """

    FIELDS = frozenset({"flow_run_id", "thread_id", "node"})

    def __init__(
        self, name: str, agent: Runner, session_thread: str, *, store: Store | None = None
    ) -> None:
        fields = {f for _, f, _, _ in string.Formatter().parse(session_thread) if f is not None}
        unknown = fields - self.FIELDS
        if unknown or "" in fields:
            raise ConfigError(
                f"cannot define agent node {name!r}: its session_thread template "
                f"{session_thread!r} uses {sorted(unknown or {'{}'})}; use only "
                "{flow_run_id}, {thread_id} and {node}"
            )
        self.name = name
        self.agent = agent
        self.session_thread = session_thread
        self.store = store
        self.owned = "flow_run_id" in fields

    def __repr__(self) -> str:
        return f"<AgentNode {self.name!r} runs {self.agent.name!r} on {self.session_thread!r}>"

    def thread_for(self, *, flow_run_id: str, thread_id: str) -> str:
        """The session thread this node uses in the given flow run."""
        return self.session_thread.format(
            flow_run_id=flow_run_id, thread_id=thread_id, node=self.name
        )

    def __call__(self, state: Any, ctx: RunContext) -> Any:
        store = self.store or ctx.store
        thread = self.thread_for(flow_run_id=ctx.run_id, thread_id=ctx.thread_id)
        control = ctx._signals.control
        project = ctx.project_id  # the agent's rows replicate with the flow's
        pending = store.get_park(thread)
        if pending is not None:  # the agent waits on an ask: answer it, or park the flow on it
            answer = ctx.interrupt(pending.reason, pending.context, deadline=pending.deadline)
            result = self.agent.resume(store, thread, answer, control=control, project_id=project)
        else:
            owner = f"flow:{ctx.runner}" if self.owned else None
            result = self.agent.start(
                store, state, thread_id=thread, owner=owner, control=control, project_id=project
            )
        while result.park is not None:
            answer = ctx.interrupt(
                result.park.reason, result.park.context, deadline=result.park.deadline
            )
            result = self.agent.resume(store, thread, answer, control=control, project_id=project)
        if result.status == FAILED:
            ctx.check()  # the flow's own stop, abort or timeout reached the agent: end the same way
            raise RunError(
                f"agent {self.agent.name!r} failed on session thread {thread!r}: "
                f"{result.reason}: {result.error or '-'}"
            )
        return result.state


# ---------------------------------------------------------------------------- running


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


class _Signals:
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

    def __init__(self, execution: _Execution, step: Step, index: int, resume_value: Any) -> None:
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
class _Run:
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
    ) -> _Run:
        """A placeholder until the thread is read under the lease (see ``_Execution.adopt``)."""
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


class _Execution:
    """One execution of a run under its lease: the step loop, the park and the run end."""

    def __init__(self, run: _Run, signals: _Signals, holder: str) -> None:
        self.run = run
        self.signals = signals
        self.holder = holder
        self.beat: Heartbeat | None = None

    def adopt(self, source: Checkpoint, project_id: str) -> _Run:
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


def _check_max_steps(max_steps: int | None, action: str) -> None:
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
    ):
        raise ConfigError(
            f"cannot {action} with max_steps={max_steps!r}: give a whole number of steps of at "
            "least 1, or None to run to the end"
        )


def _project_of(source: Checkpoint, project_id: str | None, connection: Connection | None) -> str:
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


# ---------------------------------------------------------------------------- reading runs


def locate_thread(
    store: Store, thread_id: str, *, action: str, connection: Connection | None = None
) -> None:
    """The resume path's first look at a thread: restore it if missing, else refuse it.

    Resume, fork and stop call it before they take the thread's lease. When the store holds a
    checkpoint of the thread, the plane is not consulted (the local copy is the source of
    truth). Otherwise it is restored from the plane (seed 000 "Restore-anywhere",
    :func:`durability.restore.restore_if_missing`) when ``DURABILITY_RESTORE_FROM_PLANE``
    allows it and the store is connected (``connection``, else its active connection); a thread
    still missing is refused with :class:`~durability.errors.RunNotResumable`, saying why the
    plane did not supply it.

    Raises:
        RunNotResumable: neither the store nor the plane holds the thread.
        RestoreError: the plane could not be read, or the restore was refused.
        LeaseHeld: another worker is restoring or running the thread.
    """
    check_id(thread_id, "thread_id", action=action)
    if store.has_thread(thread_id):
        return
    from durability.restore import _restore_if_missing

    _, why_not = _restore_if_missing(store, thread_id, connection)
    if not store.has_thread(thread_id):
        raise RunNotResumable(
            f"cannot {action}: the store {store!r} holds no checkpoint of it"
            + (f", and {why_not}" if why_not else "")
            + "; check the thread id and the store URL (`durability runs URL` lists the runs)"
        )


def read_thread(store: Store, thread_id: str, *, page: int = 1000) -> list[Checkpoint]:
    """Every checkpoint of the thread's root namespace, oldest first (``seq`` order), paged."""
    rows: list[Checkpoint] = []
    after: int | None = None
    while True:
        batch = store.history(thread_id, after_seq=after, limit=page)
        rows.extend(batch)
        if len(batch) < page:
            return rows
        after = batch[-1].seq


def _last_step_of(
    history: Sequence[Checkpoint], run_id: str, before_seq: int | None
) -> Checkpoint | None:
    """The run's last row that is not a run end, before ``before_seq`` (seq order)."""
    for cp in reversed(history):
        if before_seq is not None and cp.seq is not None and cp.seq >= before_seq:
            continue
        if cp.run_id == run_id and not cp.is_run_end:
            return cp
    return None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a store, as ``durability runs`` shows it.

    ``status``: ``completed``, ``failed`` (with ``reason``), ``parked`` (with the park's
    ``park_reason``, ``park_deadline`` and ``time_left``), ``running`` (a live lease),
    ``stalled`` (no run end, not parked, not running: killed, lost its lease or paused in step
    mode; resumable) or ``abandoned`` (never ended, and a later run started on its thread).
    """

    thread_id: str
    run_id: str
    runner: str
    status: str
    last_step: str | None
    steps: int
    started_at: datetime | None
    updated_at: datetime | None
    reason: str | None = None
    error: str | None = None
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None
    park_reason: str | None = None
    park_deadline: datetime | None = None
    time_left: timedelta | None = None


def list_runs(
    store: Store, *, now: datetime | None = None, progress: bool = False
) -> list[RunInfo]:
    """Every run in the store, thread by thread, each with its status, lease and park.

    Reads each thread's root namespace whole, in ``seq`` order. ``progress`` shows a tqdm bar.
    """
    now = now if now is not None else store.clock()
    parks = {p.thread_id: p for p in store.parks()}
    records: Iterator[Any] = store.iter_threads()
    if progress:
        from tqdm.auto import tqdm

        records = iter(tqdm(records, desc="threads", unit="thread", disable=None))
    infos: list[RunInfo] = []
    for record in records:
        history = read_thread(store, record.thread_id)
        runs: dict[str, list[Checkpoint]] = {}
        for cp in history:
            runs.setdefault(cp.run_id, []).append(cp)
        lease = record.lease if record.lease is not None and record.lease.live(now) else None
        for run_id, rows in runs.items():
            infos.append(_run_info(record.thread_id, run_id, rows, history[-1], lease, parks, now))
    return infos


def _run_info(
    thread_id: str,
    run_id: str,
    rows: list[Checkpoint],
    thread_latest: Checkpoint,
    lease: Any,
    parks: dict[str, Park],
    now: datetime,
) -> RunInfo:
    last = rows[-1]
    steps = [r for r in rows if r.step_type not in (STEP_RUN_END, STEP_RUN_START)]
    park = parks.get(thread_id)
    info: dict[str, Any] = {}
    if last.is_run_end:
        record = last.node_output if isinstance(last.node_output, dict) else {}
        state = last.state if isinstance(last.state, dict) else {}
        info.update(
            status=COMPLETED if last.status != FAILED else FAILED,
            reason=record.get("run_reason", state.get("run_reason")),
            error=record.get("run_error", state.get("run_error")),
        )
    elif park is not None and park.run_id == run_id and park.checkpoint_id == last.checkpoint_id:
        info.update(
            status=PARKED,
            park_reason=park.reason,
            park_deadline=park.deadline,
            time_left=park.deadline - now,
        )
    elif lease is not None and lease.run_id == run_id:
        info.update(status="running")
    else:
        info.update(status="stalled" if last is thread_latest else "abandoned")
    if lease is not None and lease.run_id == run_id:
        info.update(lease_holder=lease.holder, lease_expires_at=lease.expires_at)
    return RunInfo(
        thread_id=thread_id,
        run_id=run_id,
        runner=last.runner,
        last_step=steps[-1].node_id if steps else None,
        steps=sum(1 for r in steps if r.step_type == STEP_NODE),
        started_at=rows[0].created_at,
        updated_at=last.created_at,
        **info,
    )


# ---------------------------------------------------------------------------- lookup


def load_runner(spec: str) -> Runner:
    """The runner named by ``module:attr`` (``attr`` may be dotted), for ``durability resume``.

    ``attr`` is a :class:`Runner` (or :class:`Flow`), or a callable taking no arguments that
    returns one (a factory: build the definition, and any per-run stores, when asked).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RunError(
            f"cannot load the runner {spec!r}: name it as module:attr, e.g. myapp.flows:publish"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RunError(
            f"cannot load the runner {spec!r}: module {module_name!r} does not import ({exc}); "
            "run from the directory that holds it or add it to PYTHONPATH"
        ) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise RunError(
                f"cannot load the runner {spec!r}: {module_name!r} has no attribute {attr!r}"
            ) from exc
    if not isinstance(target, Runner) and callable(target):
        target = target()
    if not isinstance(target, Runner):
        raise RunError(
            f"cannot load the runner {spec!r}: it is a {type(target).__name__}, not a Runner or "
            "a factory returning one"
        )
    return target


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "-"


__all__ = [
    "NO_VALUE",
    "PARKED",
    "PAUSED",
    "REASON_ABORTED",
    "REASON_CANCELLED",
    "REASON_ERROR",
    "REASON_TIMEOUT",
    "AgentNode",
    "Flow",
    "RunContext",
    "RunControl",
    "RunInfo",
    "RunResult",
    "Runner",
    "Step",
    "list_runs",
    "load_runner",
    "locate_thread",
    "read_thread",
]
