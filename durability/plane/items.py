"""What the plane accepts of an ingest item: its caps, and one item checked and turned into a row.

An item the plane will not store is refused on its own (:class:`Refusal`, with the status a
compatibility-mode plane answers for the whole batch): a field of the wrong type, a text over
its cap or holding a NUL (Postgres text cannot hold one), a ``state_snapshot`` whose compact
JSON is over :attr:`PlaneCaps.state_bytes`, a ``created_at`` that overflows once converted to
UTC. The checks run in one pass over the item with plain dictionary look-ups (an ingest of 500
items runs them 500 times, off the event loop: see :mod:`durability.plane.app`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from durability.errors import ConfigError
from durability.plane.schema import namespace_of
from durability.plane.storage import Row, order_micros

RESOURCE_TYPES = frozenset({"agent", "chain", "swarm", "supervisor"})
STATUSES = frozenset({"completed", "interrupted", "failed"})
#: Texts that only need to be free of NUL (their length is not capped).
_UNCAPPED_TEXTS = ("checkpoint_id", "execution_id")


@dataclass(frozen=True, slots=True)
class PlaneCaps:
    """What the plane refuses, announced in ``auth/check`` as ``limits``.

    ``state_bytes`` is measured on the compact JSON of ``state_snapshot``; 1 MiB by default.
    """

    state_bytes: int = 1_048_576
    step_type_chars: int = 40
    agent_id_chars: int = 255
    chain_id_chars: int = 255
    node_id_chars: int = 1024
    body_bytes: int = 64 * 1024 * 1024

    def announced(self) -> dict[str, int]:
        return {
            "state_bytes": self.state_bytes,
            "step_type_chars": self.step_type_chars,
            "agent_id_chars": self.agent_id_chars,
            "body_bytes": self.body_bytes,
        }

    def text_limits(self) -> tuple[tuple[str, int | None], ...]:
        """The optional text fields of an item and the characters each may hold (``None``: any)."""
        return (
            ("step_type", self.step_type_chars),
            ("agent_id", self.agent_id_chars),
            ("chain_id", self.chain_id_chars),
            ("node_id", self.node_id_chars),
            ("parent_checkpoint_id", None),
            ("created_at", 64),
        )


class Refusal(Exception):
    """An item the plane refuses: ``status`` is what compat mode answers for it."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def named(item: Any) -> dict[str, str] | None:
    """How a rejection names an item (its ids and namespace); ``None`` for a malformed item."""
    if not isinstance(item, dict):
        return None
    checkpoint_id, execution_id = item.get("checkpoint_id"), item.get("execution_id")
    if not (isinstance(checkpoint_id, str) and checkpoint_id):
        return None
    if not (isinstance(execution_id, str) and execution_id):
        return None
    return {
        "checkpoint_id": checkpoint_id,
        "execution_id": execution_id,
        "namespace": namespace_of(item.get("metadata")),
    }


def validate(item: dict[str, Any], caps: PlaneCaps, limits: Any = None) -> Row:
    """Check one item (shape first, then caps) and turn it into a row.

    ``item`` has passed :func:`named`; ``limits`` is ``caps.text_limits()``, computed once a
    batch by the caller (computed here when not given).
    """
    state = _object_field(item, "state_snapshot")
    metadata = _object_field(item, "metadata")
    state_text = orjson.dumps(state)
    if len(state_text) > caps.state_bytes:
        raise Refusal(
            f"state_snapshot is {len(state_text)} bytes, over the {caps.state_bytes}-byte cap", 413
        )
    texts = _texts(item, caps.text_limits() if limits is None else limits)
    resource_type = _choice_field(item, "resource_type", "chain", RESOURCE_TYPES)
    status = _choice_field(item, "status", "completed", STATUSES)
    checkpoint_id, execution_id = item["checkpoint_id"], item["execution_id"]
    return Row(
        checkpoint_id,
        execution_id,
        namespace_of(metadata),
        {
            "checkpoint_id": checkpoint_id,
            "execution_id": execution_id,
            "resource_type": resource_type,
            "agent_id": texts["agent_id"],
            "chain_id": texts["chain_id"],
            "node_id": texts["node_id"] or "",
            "step_index": _integer_field(item, "step_index"),
            "step_type": texts["step_type"],
            "status": status,
            "parent_checkpoint_id": texts["parent_checkpoint_id"],
            "state_snapshot": state_text.decode(),
            "metadata": orjson.dumps(metadata).decode(),
            "created_at": texts["created_at"],
            "order_at": _order_at(texts["created_at"]),
            "sequence": _integer_field(item, "sequence"),
        },
    )


def _object_field(item: dict[str, Any], name: str) -> dict[str, Any]:
    """An object field of an item (``{}`` when absent or null)."""
    value = item.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refusal(f"{name} must be an object", 422)
    return value


def _texts(
    item: dict[str, Any], limits: tuple[tuple[str, int | None], ...]
) -> dict[str, str | None]:
    """The item's optional text fields, each a string or null within its cap; then every text
    field free of NUL (the ids first)."""
    texts: dict[str, str | None] = {}
    for name, limit in limits:
        value = item.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise Refusal(f"{name} must be a string or null", 422)
            if limit is not None and len(value) > limit:
                raise Refusal(
                    f"{name} is {len(value)} characters, over the {limit}-character limit", 422
                )
        texts[name] = value
    for name in _UNCAPPED_TEXTS:
        if "\x00" in item[name]:
            raise Refusal(f"{name} contains a NUL character, which the plane cannot store", 422)
    for name, _ in limits:
        value = texts[name]
        if value is not None and "\x00" in value:
            raise Refusal(f"{name} contains a NUL character, which the plane cannot store", 422)
    return texts


def _choice_field(item: dict[str, Any], name: str, default: str, choices: Any) -> str:
    """A field that must be one of ``choices`` (``default`` when absent or empty)."""
    value = item.get(name) or default
    if not isinstance(value, str) or value not in choices:
        raise Refusal(f"{name} {str(value)[:40]!r} is not one of {', '.join(sorted(choices))}", 422)
    return value


def _integer_field(item: dict[str, Any], name: str) -> int | None:
    """A 64-bit integer field, or null."""
    number = item.get(name)
    if number is not None and (
        not isinstance(number, int) or isinstance(number, bool) or abs(number) >= 2**63
    ):
        raise Refusal(f"{name} must be an integer or null", 422)
    return number


def _order_at(created_at: str | None) -> int | None:
    """The plane's order of a row written at ``created_at``."""
    try:
        return order_micros(created_at, None)
    except ConfigError:  # a time that overflows once converted to UTC
        raise Refusal(
            f"created_at {created_at!r} is outside the times the plane can order "
            "(it overflows in UTC); send an ISO 8601 time between years 1 and 9999 UTC",
            422,
        ) from None


__all__ = ["PlaneCaps", "Refusal", "named", "validate"]
