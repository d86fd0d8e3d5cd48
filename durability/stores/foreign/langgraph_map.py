"""How a LangGraph checkpoint maps onto the durability model (no LangGraph import here).

One mapping serves :class:`durability.langgraph.DurabilitySaver` (writing) and the
read-only ``langgraph+sqlite://`` / ``langgraph+postgresql://`` stores (reading), so a thread
looks the same in a notebook whichever of them holds it. The table is in
:mod:`durability.langgraph`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from durability.clock import parse_aware
from durability.model import COMPLETED, INTERRUPTED, STEP_LANGGRAPH, Checkpoint

#: The metadata key holding a LangGraph checkpoint's bookkeeping.
BOOKKEEPING = "__langgraph__"
INPUT_NODE = "__input__"
INTERRUPT = "__interrupt__"
RESUME = "__resume__"
_PULL = "__pregel_pull"


def ran_nodes(seen: Mapping[str, Any], before: Mapping[str, Any]) -> str:
    """The nodes whose ``versions_seen`` moved since the parent: the ones that ran, sorted.

    LangGraph also records what its interrupt_before/after checks saw under
    ``"__interrupt__"``; that is not a node.
    """
    return ",".join(sorted(n for n, v in seen.items() if n != INTERRUPT and before.get(n) != v))


def node_of(task_path: str) -> str | None:
    """The node of a pull task, from its task path (``~__pregel_pull, node``)."""
    parts = task_path.lstrip("~").split(", ")
    return parts[1] if len(parts) >= 2 and parts[0] == _PULL else None


def to_checkpoint(
    *,
    thread_id: str,
    namespace: str,
    parent: str | None,
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any],
    state: dict[str, Any],
    parent_seen: Mapping[str, Any],
    status: str = COMPLETED,
    interrupt: tuple[str, Any] | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    seq: int | None = None,
    size_bytes: int | None = None,
) -> Checkpoint:
    """The durability checkpoint for one LangGraph checkpoint (``state``: its channel values)."""
    bookkeeping = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values")}
    if metadata.get("source") == "input":
        node_id = INPUT_NODE
    else:
        node_id = ran_nodes(checkpoint.get("versions_seen") or {}, parent_seen)
    reason, context = interrupt if interrupt is not None else (None, {})
    return Checkpoint(
        thread_id=thread_id,
        namespace=namespace,
        checkpoint_id=str(checkpoint["id"]),
        parent_checkpoint_id=parent,
        run_id=_text(metadata.get("run_id")),
        step=_integer(metadata.get("step")),
        node_id=node_id,
        step_type=STEP_LANGGRAPH,
        status=INTERRUPTED if interrupt is not None else status,
        interrupt_reason=reason,
        interrupt_context=context,
        state=state,
        created_at=parse_aware(checkpoint.get("ts")),
        metadata={**metadata, **(extra_metadata or {}), BOOKKEEPING: bookkeeping},
        seq=seq,
        size_bytes=size_bytes,
    )


def interrupt_fields(
    values: Iterable[Any], node: str | None, task_id: str, *, clear: bool = True
) -> tuple[str, dict[str, Any]]:
    """``interrupt_reason`` and ``interrupt_context`` for a task's ``__interrupt__`` write values.

    ``clear=False`` leaves the interrupts' values out of the context (a serializer such as an
    encrypting one keeps them out of clear fields).
    """
    found: list[Any] = []
    for value in values:
        found += list(value) if isinstance(value, list | tuple) else [value]
    asked = [getattr(i, "value", i) for i in found]
    if clear and len(asked) == 1 and isinstance(asked[0], str):
        reason = asked[0]
    else:
        reason = f"waiting for input in {node or task_id}"
    interrupts: list[dict[str, Any]] = []
    for item, value in zip(found, asked, strict=True):
        entry: dict[str, Any] = {"id": getattr(item, "id", None)}
        if clear:
            entry["value"] = value
        interrupts.append(entry)
    return reason, {"node": node, "task_id": task_id, "interrupts": interrupts}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _integer(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
