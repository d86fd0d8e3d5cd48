"""The fastaiagent wire item, both ways (the ingest item and what a restore reads back).

A checkpoint goes to the plane as exactly the item the fastaiagent SDK sends, so one plane serves
both. What that item has no field for rides in one extension object, ``metadata["durability"]``,
marked with :data:`CODEC_MARK`: the namespace, the run id, the original status (the wire only
knows ``completed``, ``interrupted`` and ``failed``), the store's ``agent_id`` and ``project_id``,
the user metadata, and which payload fields were wrapped. A fastaiagent plane stores the object
untouched, so :func:`checkpoint_from_wire` gets the exact checkpoint back.

Payloads travel as the codec's typed JSON: a JSON-native value is itself, anything else (a
datetime, a dataclass, a tuple) is the codec's envelope, so nothing is decoded on the way out and
nothing is lost on the way back. The wire wants objects for ``state_snapshot`` and the payload
fields of ``metadata``; a value that is not a JSON object is sent as ``{"value": …}`` and the
extension's ``wrapped`` list names it. ``state`` may also pass through a :class:`PayloadEncoder`
(a seam for a wire-level transform); metadata always stays clear. A store that encrypts
(``durability.crypto``) already holds its state as a sealed envelope, a JSON object: it is sent
as the ``state_snapshot`` untouched, counted at its own size by the plane's cap, and comes back
from :func:`checkpoint_from_wire` as a :class:`~durability.crypto.Sealed` state that a restore
writes as it is; only a process holding the key opens it.

Checkpoint ids are unique within a thread (and namespace), not across threads. A plane that
announces it keys rows by execution, namespace and checkpoint id (this project's plane) gets the
store's own ids. Any other plane may keep one row per checkpoint id (the fastaiagent plane is
idempotent by ``checkpoint_id``), so it gets a wire id derived from (thread, namespace,
checkpoint id), :func:`wire_checkpoint_id`, and the parent's the same way, so history still
links; the extension keeps the originals, and :func:`checkpoint_from_wire` returns them.

An item without the extension (one the fastaiagent SDK sent) maps as its own restore does: the
runner from ``metadata.chain_name``, else ``agent_id``, else ``chain_id``; payloads as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Protocol

import orjson

from durability import codec
from durability.clock import as_utc
from durability.crypto.format import Sealed
from durability.errors import CodecError, RestoreError
from durability.model import COMPLETED, FAILED, INTERRUPTED, STEP_RUN_END, Checkpoint
from durability.stores.rows import (
    INTEGER_FIELDS,
    NULLABLE_FIELDS,
    PAYLOAD_FIELDS,
    STORED_FIELDS,
    EncodedCheckpoint,
)

#: Marks the extension object and the format of the payloads in the item (the codec's typed JSON).
CODEC_MARK = "durability.codec/1"

#: The key of the extension object inside the item's ``metadata``.
EXTENSION_KEY = "durability"

#: What keys a row on a plane that announces ``features.checkpoint_key`` as this list in its
#: auth check (this project's plane): then the store's own checkpoint ids are sent.
ROW_KEY = ("execution_id", "namespace", "checkpoint_id")

#: The statuses the wire carries; any other is sent as ``completed`` (the extension keeps it).
WIRE_STATUSES = frozenset({COMPLETED, INTERRUPTED, FAILED})

#: The resource types, read from the root of ``agent_path``.
RESOURCE_TYPES = ("agent", "chain", "swarm", "supervisor")

_PAYLOAD_FIELDS = ("node_input", "node_output", "interrupt_context")

#: The stored fields the item carries in keys of its own, nothing lost: the ids, the runner's
#: names, the scalars it knows and the payloads (``size_bytes`` is the store's count, not sent).
_IN_ITEM = frozenset(
    {
        "thread_id",
        "checkpoint_id",
        "parent_checkpoint_id",
        "runner",
        "agent_path",
        "node_id",
        "step",
        "step_type",
        "iteration",
        "interrupt_reason",
        "created_at",
        *PAYLOAD_FIELDS,
        "size_bytes",
    }
)
#: Every other stored field rides in the extension under its own name (the wire has no key for
#: it, or only a lossy one: the status, the agent id), so a field a store gains travels too.
EXTENSION_FIELDS = tuple(name for name in STORED_FIELDS if name not in _IN_ITEM)
_extension_values = attrgetter(*EXTENSION_FIELDS)

#: Starts every derived wire checkpoint id (:func:`wire_checkpoint_id`).
WIRE_ID_PREFIX = "durability-"

#: How a plane's answer names an item of a batch: (wire checkpoint id, execution id, namespace).
ItemRef = tuple[str, str, str]


def wire_checkpoint_id(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    """The checkpoint id sent to a plane that may key rows by checkpoint id alone: unique per
    (thread, namespace, checkpoint id), deterministic (a re-send is the same row), 43 characters."""
    digest = hashlib.sha256(
        "\x00".join((thread_id, namespace, checkpoint_id)).encode("utf-8", "surrogatepass")
    )
    return WIRE_ID_PREFIX + digest.hexdigest()[:32]


class PayloadEncoder(Protocol):
    """Turns the wire ``state_snapshot`` into what is sent, and back (the BYOK seam).

    ``encode`` receives the state as a JSON object (the codec's typed JSON, wrapped as
    ``{"value": …}`` when the state is not an object) and returns the JSON object to send, e.g.
    ``{"ciphertext": "…", "key_id": "…"}``; ``decode`` reverses it. ``name`` is recorded in the
    extension so a restore knows which encoder to ask. The default is :class:`ClearPayload`.
    """

    name: str

    def encode(self, state: dict[str, Any]) -> dict[str, Any]: ...

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]: ...


class ClearPayload:
    """The default :class:`PayloadEncoder`: ``state`` travels in clear."""

    name = "clear"

    def encode(self, state: dict[str, Any]) -> dict[str, Any]:
        return state

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        return payload


CLEAR = ClearPayload()


def resource_type(agent_path: str | None, node_id: str) -> str:
    """``agent``, ``chain``, ``swarm`` or ``supervisor``, from the root segment of ``agent_path``.

    Rooting on the path makes every row of one run agree (a swarm's children write under
    ``swarm:<name>/agent:<child>``, and they are still a swarm's rows).
    """
    root = (agent_path or "").split("/", 1)[0]
    if root.startswith("swarm:"):
        return "swarm"
    if root.startswith("supervisor:"):
        return "supervisor"
    if root.startswith("agent:") or node_id.startswith("turn:"):
        return "agent"
    return "chain"


def wire_status(status: str) -> str:
    """The status the wire carries: the status itself when the wire knows it, else ``completed``."""
    return status if status in WIRE_STATUSES else COMPLETED


@dataclass(frozen=True, slots=True)
class WireRow:
    """One row ready to send: the item's bytes, the state's size on the wire, how the plane will
    name it (``ref``) and the fields the drain checks against the plane's caps (the item itself is
    only parsed back on demand). ``checkpoint_id`` is the id on the wire."""

    body: bytes
    state_bytes: int
    checkpoint_id: str
    step_type: str | None
    agent_id: str | None
    execution_id: str = ""
    namespace: str = ""

    @property
    def ref(self) -> ItemRef:
        """How a plane's answer names this item."""
        return (self.checkpoint_id, self.execution_id, self.namespace)

    @property
    def item(self) -> dict[str, Any]:
        """The wire item (parsed from :attr:`body`)."""
        item: dict[str, Any] = orjson.loads(self.body)
        return item


def _embedded(text: str) -> tuple[Any, bool]:
    """A codec text as the JSON object the wire wants, and whether it had to be wrapped as
    ``{"value": …}``.

    The codec writes compact JSON, so an object's text starts with ``{``. The text is embedded
    in the item as it is (``orjson.Fragment``): a 2 KB state is never parsed into Python objects
    and dumped again on its way out, which was a third of the drain's time.
    """
    fragment = orjson.Fragment(text)
    if text.startswith("{"):
        return fragment, False
    return {"value": fragment}, True


def to_wire(
    row: EncodedCheckpoint,
    *,
    agent_ids: Mapping[str, str] | None = None,
    encoder: PayloadEncoder = CLEAR,
    stripped: str | None = None,
    own_ids: bool = True,
) -> WireRow:
    """Map a stored row to the fastaiagent ingest item, with the extension in ``metadata``.

    Args:
        row: The row as the store keeps it (payloads as codec text).
        agent_ids: Agent names this connection registered with the plane → their plane ids;
            resolved here, when the batch is mapped, so every row of a run gets the same id.
        encoder: How ``state`` is sent (default: in clear).
        stripped: When set, send a state-stripped copy (empty payloads; the reason is kept in
            the extension): what the plane gets for a run end it refused for size.
        own_ids: Send the store's checkpoint ids (a plane that keys rows per execution); else
            derived ones (:func:`wire_checkpoint_id`), the originals kept in the extension.
    """
    state, payloads, user_metadata, counters, wrapped = _payload_parts(row, stripped)
    extension = _extension(row, user_metadata, wrapped, encoder.name, stripped)
    checkpoint_id, parent_id = _sent_ids(row, own_ids, extension)
    # An encoder sees the state as a JSON object, so only then is it parsed.
    sent_state = state if encoder is CLEAR else encoder.encode(orjson.loads(orjson.dumps(state)))
    kind, agent_id, chain_id = _resource(row, agent_ids)
    item: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "execution_id": row.thread_id,
        "resource_type": kind,
        "agent_id": agent_id,
        "chain_id": chain_id,
        "node_id": row.node_id,
        "step_index": row.step,
        "step_type": row.step_type,
        "status": wire_status(row.status),
        "parent_checkpoint_id": parent_id,
        "state_snapshot": sent_state,
        "metadata": _item_metadata(row, payloads, counters, extension),
        "created_at": row.created_at.isoformat(),
        "sequence": row.seq,
    }
    # The stored text is what is sent when nothing wrapped or encoded it: its length is the size.
    as_stored = stripped is None and "state" not in wrapped and encoder is CLEAR
    state_bytes = _text_bytes(row.state) if as_stored else len(orjson.dumps(sent_state))
    return WireRow(
        orjson.dumps(item),
        state_bytes,
        checkpoint_id,
        row.step_type,
        agent_id,
        row.thread_id,
        row.namespace,
    )


def _extension(
    row: EncodedCheckpoint,
    user_metadata: Any,
    wrapped: list[str],
    payload: str,
    stripped: str | None,
) -> dict[str, Any]:
    """The extension object: the stored fields the wire has no key for, the user metadata, the
    payloads wrapped, the payload encoder's name and why the state was stripped, if it was."""
    extension: dict[str, Any] = {
        "codec": CODEC_MARK,
        **dict(zip(EXTENSION_FIELDS, _extension_values(row), strict=True)),
        "metadata": user_metadata,
        "wrapped": wrapped,
        "payload": payload,
    }
    if stripped is not None:
        extension["stripped"] = stripped
    return extension


def _item_metadata(
    row: EncodedCheckpoint, payloads: dict[str, Any], counters: Any, extension: dict[str, Any]
) -> dict[str, Any]:
    """The item's ``metadata``: the payloads and scalars the wire keeps there (in the
    fastaiagent SDK's order), then the extension."""
    return {
        "node_input": payloads["node_input"],
        "node_output": payloads["node_output"],
        "iteration": row.iteration,
        "iteration_counters": counters,
        "interrupt_reason": row.interrupt_reason,
        "interrupt_context": payloads["interrupt_context"],
        "agent_path": row.agent_path,
        "chain_name": row.runner or None,
        EXTENSION_KEY: extension,
    }


def _payload_parts(
    row: EncodedCheckpoint, stripped: str | None
) -> tuple[Any, dict[str, Any], Any, Any, list[str]]:
    """The state, the other payloads, the user metadata and the counters as sent (embedded
    codec text, or empty for a stripped row), and the names of the payloads wrapped."""
    if stripped is not None:
        empty: dict[str, Any] = {}
        return _stripped_state(row), dict.fromkeys(_PAYLOAD_FIELDS, empty), {}, {}, []
    state, state_wrapped = _embedded(row.state)
    embedded = {name: _embedded(getattr(row, name)) for name in _PAYLOAD_FIELDS}
    wrapped = ["state"] if state_wrapped else []
    wrapped += [name for name, (_, was) in embedded.items() if was]
    payloads = {name: value for name, (value, _) in embedded.items()}
    metadata, counters = orjson.Fragment(row.metadata), orjson.Fragment(row.iteration_counters)
    return state, payloads, metadata, counters, wrapped


def _sent_ids(
    row: EncodedCheckpoint, own_ids: bool, extension: dict[str, Any]
) -> tuple[str, str | None]:
    """The checkpoint and parent ids sent: the store's own, or derived ones with the
    originals kept in ``extension`` (a plane that keys rows by checkpoint id alone)."""
    checkpoint_id, parent_id = row.checkpoint_id, row.parent_checkpoint_id
    if own_ids:
        return checkpoint_id, parent_id
    extension["checkpoint_id"], extension["parent_checkpoint_id"] = checkpoint_id, parent_id
    derived_parent = None
    if parent_id is not None:
        derived_parent = wire_checkpoint_id(row.thread_id, row.namespace, parent_id)
    return wire_checkpoint_id(row.thread_id, row.namespace, checkpoint_id), derived_parent


def _resource(
    row: EncodedCheckpoint, agent_ids: Mapping[str, str] | None
) -> tuple[str, str | None, str | None]:
    """The row's resource type and its agent id (resolved to the plane's) or chain id."""
    kind = resource_type(row.agent_path, row.node_id)
    if kind == "chain":
        return kind, None, row.runner
    if not row.runner:
        return kind, None, None
    return kind, (agent_ids or {}).get(row.runner, row.runner), None


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _stripped_state(row: EncodedCheckpoint) -> dict[str, Any]:
    """What a stripped run end keeps: the run's outcome keys (fastaiagent's run-end vocabulary)."""
    kept: dict[str, Any] = {"run_status": row.status}
    try:
        state = orjson.loads(row.state)
    except orjson.JSONDecodeError:  # pragma: no cover - the codec wrote it
        return kept
    if isinstance(state, dict):
        for key in ("run_status", "run_error", "run_reason"):
            value = state.get(key)
            if isinstance(value, str):
                kept[key] = value[:2000]
    return kept


def checkpoint_to_wire(
    cp: Checkpoint,
    *,
    agent_ids: Mapping[str, str] | None = None,
    encoder: PayloadEncoder = CLEAR,
    own_ids: bool = True,
) -> dict[str, Any]:
    """The wire item of a checkpoint (``created_at`` and ``checkpoint_id`` must be filled).

    The inverse of :func:`checkpoint_from_wire`: ``checkpoint_from_wire(checkpoint_to_wire(cp))``
    equals ``cp`` except for the store-filled ``seq`` and ``size_bytes``.
    """
    row = EncodedCheckpoint.encode(cp)
    row.seq = cp.seq
    return to_wire(row, agent_ids=agent_ids, encoder=encoder, own_ids=own_ids).item


def is_durability_item(item: Mapping[str, Any]) -> bool:
    """Whether the item carries this project's extension (else it came from another client)."""
    metadata = item.get("metadata")
    if not isinstance(metadata, dict):
        return False
    extension = metadata.get(EXTENSION_KEY)
    return isinstance(extension, dict) and extension.get("codec") == CODEC_MARK


def checkpoint_from_wire(
    item: Mapping[str, Any],
    *,
    encoders: Mapping[str, PayloadEncoder] | None = None,
    allowed_modules: tuple[str, ...] = (),
) -> Checkpoint:
    """The checkpoint a wire item (as ingested, or as the plane serves it back) describes.

    Args:
        item: The item, e.g. the body of ``GET …/{execution_id}/latest``.
        encoders: Payload encoders by name, for a ``state`` sent through one (``clear`` is
            always known).
        allowed_modules: Module prefixes the codec may import to revive classes in payloads.

    Raises:
        RestoreError: The item is not a wire item, names an unknown payload encoder, or holds a
            payload the codec cannot read back.
    """
    if not isinstance(item, Mapping) or not isinstance(item.get("execution_id"), str):
        raise RestoreError(
            f"cannot read a checkpoint from the plane's answer {str(item)[:120]!r}: it is not a "
            "wire item (an object with an execution_id); check that the target is a checkpoint plane"
        )
    metadata = item.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    common = _common_fields(item, metadata)
    if not is_durability_item(item):
        return Checkpoint(
            **common,
            agent_id=item.get("agent_id"),
            status=item.get("status") or COMPLETED,
            state=item.get("state_snapshot") or {},
            node_input=metadata.get("node_input") or {},
            node_output=metadata.get("node_output") or {},
            iteration_counters=metadata.get("iteration_counters") or {},
            interrupt_context=metadata.get("interrupt_context") or {},
        )
    where = f"checkpoint {str(item.get('checkpoint_id'))[:80]!r} of execution {item['execution_id'][:80]!r}"
    extension = metadata[EXTENSION_KEY]
    wrapped = set(extension.get("wrapped") or ())
    state = _payload_encoder(extension, encoders, where).decode(item.get("state_snapshot") or {})

    def value(raw: Any, field: str) -> Any:
        return _payload_value(raw, field, field in wrapped, where, allowed_modules)

    common["checkpoint_id"], common["parent_checkpoint_id"] = store_ids(item)
    extended = {name: _as_stored(name, extension.get(name)) for name in EXTENSION_FIELDS}
    extended["status"] = str(extension.get("status") or item.get("status") or COMPLETED)
    return Checkpoint(
        **common,
        **extended,
        state=value(state, "state"),
        node_input=value(metadata.get("node_input"), "node_input"),
        node_output=value(metadata.get("node_output"), "node_output"),
        iteration_counters=value(metadata.get("iteration_counters"), "iteration_counters"),
        interrupt_context=value(metadata.get("interrupt_context"), "interrupt_context"),
        metadata=value(extension.get("metadata"), "metadata"),
    )


def _common_fields(item: Mapping[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The fields every wire item carries the same way, this project's or another client's."""
    runner = metadata.get("chain_name") or item.get("agent_id") or item.get("chain_id") or ""
    return {
        "thread_id": item["execution_id"],
        "checkpoint_id": item.get("checkpoint_id") or "",
        "parent_checkpoint_id": item.get("parent_checkpoint_id"),
        "runner": str(runner),
        "agent_path": metadata.get("agent_path"),
        "node_id": item.get("node_id") or "",
        "step": int(item.get("step_index") or 0),
        "step_type": item.get("step_type"),
        "iteration": int(metadata.get("iteration") or 0),
        "interrupt_reason": metadata.get("interrupt_reason"),
        "created_at": _parse_time(item.get("created_at")),
    }


def _as_stored(name: str, raw: Any) -> Any:
    """An extension's value as the checkpoint field ``name`` holds it (an older item may lack
    it): as it is where the field may be empty, else a number or a text."""
    if name in NULLABLE_FIELDS:
        return raw
    return int(raw or 0) if name in INTEGER_FIELDS else str(raw or "")


def _payload_encoder(
    extension: Mapping[str, Any], encoders: Mapping[str, PayloadEncoder] | None, where: str
) -> PayloadEncoder:
    """The payload encoder the item's state was sent through (``clear`` is always known)."""
    name = extension.get("payload") or CLEAR.name
    encoder = CLEAR if name == CLEAR.name else (encoders or {}).get(name)
    if encoder is None:
        raise RestoreError(
            f"cannot read {where}: its state was sent through the payload encoder {name!r}, "
            "which this process does not have; pass it as encoders={name: encoder}"
        )
    return encoder


def _payload_value(
    raw: Any, field: str, wrapped: bool, where: str, allowed_modules: tuple[str, ...]
) -> Any:
    """A payload as the store keeps it: unwrapped, decoded by the codec, or a sealed envelope."""
    raw = raw if raw is not None else {}
    if wrapped:
        raw = raw.get("value") if isinstance(raw, dict) else raw
    if field == "state" and isinstance(raw, dict) and raw.get("$t") == "enc":
        # A sealed state comes back as it went: its envelope, untouched, opened by the store
        # holding the key (orjson writes the same compact text, members in their order).
        return Sealed(orjson.dumps(raw).decode())
    try:
        return codec.loads(orjson.dumps(raw), path=field, allowed_modules=allowed_modules)
    except CodecError as exc:
        raise RestoreError(f"cannot read {where}: {exc}") from exc


def store_ids(item: Mapping[str, Any]) -> tuple[str, str | None]:
    """The item's checkpoint id and parent id as the store that sent it holds them: the
    extension's when it was sent under a derived wire id, else the item's own."""
    metadata = item.get("metadata")
    extension = metadata.get(EXTENSION_KEY) if isinstance(metadata, dict) else None
    if isinstance(extension, dict) and isinstance(extension.get("checkpoint_id"), str):
        parent = extension.get("parent_checkpoint_id")
        return extension["checkpoint_id"], parent if isinstance(parent, str) else None
    parent = item.get("parent_checkpoint_id")
    return str(item.get("checkpoint_id") or ""), parent if isinstance(parent, str) else None


def was_stripped(item: Mapping[str, Any]) -> str | None:
    """The reason, when the item is a state-stripped run end (its full version was refused)."""
    if not is_durability_item(item):
        return None
    stripped = item["metadata"][EXTENSION_KEY].get("stripped")
    return str(stripped) if stripped else None


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    # The fastaiagent SDK writes UTC; a time without an offset is read as UTC, not refused.
    return as_utc(parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC))


__all__ = [
    "CLEAR",
    "CODEC_MARK",
    "EXTENSION_KEY",
    "RESOURCE_TYPES",
    "ROW_KEY",
    "STEP_RUN_END",
    "WIRE_ID_PREFIX",
    "WIRE_STATUSES",
    "ClearPayload",
    "ItemRef",
    "PayloadEncoder",
    "WireRow",
    "checkpoint_from_wire",
    "checkpoint_to_wire",
    "is_durability_item",
    "resource_type",
    "store_ids",
    "to_wire",
    "was_stripped",
    "wire_checkpoint_id",
    "wire_status",
]


def ids_checksum(checkpoint_ids: Iterable[str]) -> str:
    """The checksum of a thread's replicated rows: SHA-256 of their wire checkpoint ids, sorted
    and joined by newlines (the plane's digest route and ``durability doctor --plane`` both use
    it, so a thread's replica is compared without reading a state)."""
    digest = hashlib.sha256()
    for checkpoint_id in sorted(checkpoint_ids):
        digest.update(checkpoint_id.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()
