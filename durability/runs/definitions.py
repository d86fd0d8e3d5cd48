"""Run definitions: a :class:`Runner` (or :class:`Flow`) is a name and its ordered steps; it
holds no store, and each operation takes the store the run lives in."""

from __future__ import annotations

import importlib
import logging
import os
import socket
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durability import codec
from durability._util import redact_url
from durability.errors import (
    AlreadyResumed,
    ConfigError,
    LeaseHeld,
    RunError,
    RunNotResumable,
)
from durability.heartbeat import Heartbeat
from durability.model import (
    FAILED,
    INTERRUPTED,
    STEP_FORK_ORIGIN,
    STEP_RUN_START,
    Checkpoint,
)
from durability.runs.execution import (
    Execution,
    Run,
    RunControl,
    RunResult,
    Signals,
    check_max_steps,
    project_of,
)
from durability.runs.inventory import iso, last_step_of, locate_thread, read_thread
from durability.runs.vocabulary import (
    NO_VALUE,
    REASON_ABORTED,
    REASON_CANCELLED,
    RUN_END_NODE,
    START_NODE,
    StepFn,
)
from durability.settings import Retention, declare_retention, parse_duration
from durability.stores.base import Store
from durability.stores.ids import check_id
from durability.stores.parks import claim_park, park_of

if TYPE_CHECKING:
    from durability.replication.connection import Connection

log = logging.getLogger("durability.runs")


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
    if callable(item):  # an AgentNode names itself; a function by its own name
        own = getattr(item, "name", None)
        return Step(own if isinstance(own, str) else getattr(item, "__name__", ""), item)
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
            values at every start (a declared retention only shortens the platform's).
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
        check_max_steps(max_steps, action)
        minted = thread_id is None
        thread = str(uuid.uuid4()) if thread_id is None else thread_id
        check_id(thread, "thread_id", action=action)
        if owner is not None:
            check_id(owner, "owner", action=action)
        check_id(project_id, "project_id", action=action, allow_empty=True)
        codec.dumps(state, path="state")  # refused here, before the thread is touched
        run = Run(
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
            park = park_of(store, thread)
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
        check_max_steps(max_steps, action)
        if project_id is not None:
            check_id(project_id, "project_id", action=action, allow_empty=True)
        if value is not NO_VALUE:
            codec.dumps(value, path="value")  # refused here, before the park is claimed
        try:
            locate_thread(store, thread_id, action=action, connection=connection)
            hint = store.latest(thread_id)
            run_id = hint.run_id if hint is not None else ""
            with self._holding(
                Run.peek(self, store, deployment_store, thread_id, run_id), control
            ) as held:
                source = self._resume_source(store, thread_id, action=action)
                held.adopt(source, project_of(source, project_id, connection))
                _claim_for_resume(store, source, value)
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
        source = _fork_source(store, thread_id, checkpoint_id, action=action)
        self._check_written_by_me(source, action=action)
        position = self._position(source)
        minted = new_thread_id is None
        new_thread = str(uuid.uuid4()) if new_thread_id is None else new_thread_id
        check_id(new_thread, "new_thread_id", action=action)
        start_state = source.state if state is NO_VALUE else state
        codec.dumps(start_state, path="state")
        run = Run(
            runner=self,
            store=store,
            deployment=deployment_store or store,
            thread_id=new_thread,
            run_id=str(uuid.uuid4()),
            minted=minted,
            owner=self._default_owner(minted),
            retention=self._declared(store),
            project_id=project_of(source, project_id, connection),
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
        peek = Run.peek(self, store, deployment_store, thread_id, run_id)
        with self._holding(peek, None) as held:
            source = self._resume_source(store, thread_id, action=action, failed_ok=False)
            held.adopt(source, project_of(source, None, connection))
            if source.status == INTERRUPTED:
                claim_park(store, thread_id)
            reason = REASON_ABORTED if abort else REASON_CANCELLED
            return held.end(source.state, FAILED, self._position(source), reason=reason)

    # ------------------------------------------------------------------ pieces

    def _default_owner(self, minted: bool) -> str:
        return f"{self.kind}:{self.name}" if minted else "caller"

    def _declared(self, store: Store) -> Retention | None:
        if not self.retention:
            return None
        return declare_retention(store.settings, **self.retention)

    def _owned_threads(self, run: Run) -> list[tuple[Store, str]]:
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
                f"{latest.checkpoint_id!r} at {iso(latest.created_at)}); "
                + (
                    "a completed run is never resumed: start a new run on the thread, or fork "
                    "it from one of its steps"
                    if ended == "completed"
                    else "resume it to continue after its last real step"
                )
            )
        source = last_step_of(history, latest.run_id, latest.seq)
        if source is None:
            raise RunNotResumable(
                f"cannot {action}: its run {latest.run_id!r} failed before writing any step to "
                "resume from; start the run again"
            )
        return source

    @contextmanager
    def _holding(self, run: Run, control: RunControl | None) -> Iterator[Execution]:
        """Hold the thread's lease (heartbeat included) for the duration of the block."""
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        store = run.store
        store.acquire_lease(run.thread_id, holder, self.lease_ttl, run_id=run.run_id)
        execution = Execution(run, Signals(control, store, self.timeout), holder)
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


def _claim_for_resume(store: Store, source: Checkpoint, value: Any) -> None:
    """Check ``value`` fits the run's state and, for a parked run, claim its park (one wins)."""
    thread_id = source.thread_id
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
        pending = park_of(store, thread_id)
        if pending is not None and claim_park(store, thread_id) is None:
            raise AlreadyResumed(
                f"cannot resume run {source.run_id!r} on thread {thread_id!r}: another "
                "worker claimed its park first (exactly one resumer wins); see "
                f"`durability runs {redact_url(store.url)}`"
            )


def _fork_source(
    store: Store, thread_id: str, checkpoint_id: str | None, *, action: str
) -> Checkpoint:
    """The checkpoint a fork starts from: the one named, else the thread's last step."""
    if checkpoint_id is None:
        steps = [cp for cp in read_thread(store, thread_id) if not cp.is_run_end]
        if not steps:
            raise RunError(f"cannot {action}: it holds no step to fork from, only run ends")
        return steps[-1]
    source = store.get(thread_id, checkpoint_id)
    if source.is_run_end:
        before = last_step_of(read_thread(store, thread_id), source.run_id, source.seq)
        raise RunError(
            f"cannot fork from checkpoint {checkpoint_id!r} of thread {thread_id!r}: it is "
            f"the run end of run {source.run_id!r}, not a step; fork from the step before "
            f"it{f', checkpoint {before.checkpoint_id!r}' if before else ''}"
        )
    return source
