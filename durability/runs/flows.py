"""Flows: a :class:`Flow` is a runner whose steps may be :class:`AgentNode` steps that run an
agent's runner on a session thread the flow owns, marked and unmarked with the flow's runs."""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

from durability.errors import (
    ConfigError,
    RunError,
)
from durability.model import (
    FAILED,
)
from durability.runs.execution import (
    Run,
    RunContext,
)
from durability.stores.base import Store
from durability.stores.parks import park_of

if TYPE_CHECKING:
    pass

from durability.runs.definitions import Runner


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

    def _owned_threads(self, run: Run) -> list[tuple[Store, str]]:
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
        pending = park_of(store, thread)
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
