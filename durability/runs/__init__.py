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
the name), ``chain`` for a flow.

The rules:

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
``DURABILITY_RESTORE_FROM_PLANE`` allows it (see :mod:`durability.restore`), and refused
otherwise.

The package: :mod:`~durability.runs.definitions` (runners), :mod:`~durability.runs.flows`
(flows and agent steps),
:mod:`~durability.runs.execution` (a run in progress), :mod:`~durability.runs.inventory`
(locating, listing and loading runs), :mod:`~durability.runs.vocabulary` (names and reasons).
"""

from __future__ import annotations

from durability.model import PARK_DEADLINE, RUN_METADATA
from durability.runs.definitions import Runner, Step, load_runner
from durability.runs.execution import RunContext, RunControl, RunResult
from durability.runs.flows import AgentNode, Flow
from durability.runs.inventory import RunInfo, list_runs, locate_thread, read_thread
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
    START_NODE,
)

__all__ = [
    "MAX_ERROR_TEXT",
    "NO_VALUE",
    "PARKED",
    "PARK_DEADLINE",
    "PAUSED",
    "REASON_ABORTED",
    "REASON_CANCELLED",
    "REASON_ERROR",
    "REASON_TIMEOUT",
    "RUN_END_NODE",
    "RUN_METADATA",
    "START_NODE",
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
