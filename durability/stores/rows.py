"""How stores keep a checkpoint: the one field list, and rows encoded through the codec.

A checkpoint is encoded once, at ``put``: its scalar fields as they are, its payloads (state,
node input and output, counters, interrupt context, metadata) as codec text. The same texts
go to SQL, Redis, memory and the wire, and a row is decoded only when a caller reads it.

:data:`STORED_FIELDS` is the one list of what a store keeps of a checkpoint, in order; every
mapping (the SQL columns, the Redis document, the CLI table) derives from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from operator import attrgetter
from typing import Literal, Protocol

from durability import codec
from durability.clock import as_utc
from durability.crypto.format import ENVELOPE_PREFIX, Sealed
from durability.errors import CodecError
from durability.model import Checkpoint, PendingWrite

#: The ids that address a checkpoint and its run.
ID_FIELDS = ("thread_id", "namespace", "checkpoint_id", "run_id", "parent_checkpoint_id")
#: The scalar fields every reader may look at without decoding a payload.
SCALAR_FIELDS = (
    "runner",
    "agent_id",
    "agent_path",
    "node_id",
    "step",
    "step_type",
    "status",
    "iteration",
    "interrupt_reason",
    "created_at",
    "project_id",
)
#: The payloads, kept as codec text.
PAYLOAD_FIELDS = (
    "state",
    "node_input",
    "node_output",
    "iteration_counters",
    "interrupt_context",
    "metadata",
)
#: Everything a store keeps of a checkpoint, in column order (``seq`` is the store's own).
STORED_FIELDS = (*ID_FIELDS, *SCALAR_FIELDS, *PAYLOAD_FIELDS, "size_bytes")
#: The fields a store may leave empty (``None``); every other one always has a value.
NULLABLE_FIELDS = frozenset(
    {"parent_checkpoint_id", "agent_id", "agent_path", "step_type", "interrupt_reason"}
)
#: The integer fields (``created_at`` is a time, kept as microseconds since the epoch).
INTEGER_FIELDS = frozenset({"step", "iteration", "size_bytes"})
#: The scalar fields kept as text; a put refuses NUL and lone surrogates in each (decision 0139).
TEXT_FIELDS = tuple(
    f for f in (*ID_FIELDS, *SCALAR_FIELDS) if f not in INTEGER_FIELDS and f != "created_at"
)


@dataclass(slots=True)
class EncodedCheckpoint:
    """A checkpoint as stores keep it: scalar fields plus codec-encoded payload texts.

    The fields are :data:`STORED_FIELDS` in order, then ``seq``.
    """

    thread_id: str
    namespace: str
    checkpoint_id: str
    run_id: str
    parent_checkpoint_id: str | None
    runner: str
    agent_id: str | None
    agent_path: str | None
    node_id: str
    step: int
    step_type: str | None
    status: str
    iteration: int
    interrupt_reason: str | None
    created_at: datetime
    project_id: str
    state: str
    node_input: str
    node_output: str
    iteration_counters: str
    interrupt_context: str
    metadata: str
    size_bytes: int
    seq: int | None = None

    @classmethod
    def encode(
        cls, cp: Checkpoint, *, checkpoint_id: str = "", created_at: datetime | None = None
    ) -> EncodedCheckpoint:
        """Encode ``cp``; refusals name the field.

        ``checkpoint_id`` and ``created_at``, when given, replace the checkpoint's own (a
        store fills them); the result must have both. A :class:`~durability.crypto.Sealed`
        state is kept as its envelope (a restore carries ciphertext untouched).
        """
        texts = [_state_text(cp.state)]  # first: a refusal names the state before the rest
        texts += [codec.dumps(getattr(cp, name), path=name) for name in PAYLOAD_FIELDS[1:]]
        state, node_input, node_output, counters, context, metadata = texts
        created_at = created_at or cp.created_at
        assert created_at is not None
        return cls(
            cp.thread_id,
            cp.namespace,
            checkpoint_id or cp.checkpoint_id,
            cp.run_id,
            cp.parent_checkpoint_id,
            cp.runner,
            cp.agent_id,
            cp.agent_path,
            cp.node_id,
            cp.step,
            cp.step_type,
            cp.status,
            cp.iteration,
            cp.interrupt_reason,
            created_at,
            cp.project_id,
            state,
            node_input,
            node_output,
            counters,
            context,
            metadata,
            utf8_len("".join(texts)),
        )

    def decode(self, state: str | None = None) -> Checkpoint:
        """The checkpoint this row holds; a payload that cannot be read back fails the read.

        ``state`` replaces the stored state text (the opened one of a sealed row); a sealed
        state left unopened comes back as :class:`~durability.crypto.Sealed`.
        """
        loads = codec.loads
        text = self.state if state is None else state
        # ``__init__``'s one check of a value (not of a type) is skipped below: made here.
        self.check_numbers()
        return _checkpoint_of(
            (
                self.thread_id,
                self.node_id,
                Sealed(text) if text.startswith(ENVELOPE_PREFIX) else loads(text, path="state"),
                self.checkpoint_id,
                self.namespace,
                self.run_id,
                self.parent_checkpoint_id,
                self.runner,
                self.agent_id,
                self.agent_path,
                self.step,
                self.step_type,
                self.status,
                loads(self.node_input, path="node_input"),
                loads(self.node_output, path="node_output"),
                self.iteration,
                loads(self.iteration_counters, path="iteration_counters"),
                self.interrupt_reason,
                loads(self.interrupt_context, path="interrupt_context"),
                as_utc(self.created_at),
                loads(self.metadata, path="metadata"),
                self.project_id,
                self.seq,
                self.size_bytes,
            )
        )

    def check_numbers(self) -> None:
        """Refuse a row whose step or iteration does not fit in 64 bits: no store writes one,
        but a damaged (or hostile) Redis document or archive text can hold one."""
        for name, number in (("step", self.step), ("iteration", self.iteration)):
            if type(number) is int and not _INT64_MIN <= number <= _INT64_MAX:
                raise _beyond_64_bits(self, name, number)

    def apply(self, change: StatusChange) -> None:
        """Take ``change``'s status and interrupt fields (``size_bytes`` follows the context)."""
        self.size_bytes += utf8_len(change.interrupt_context) - utf8_len(self.interrupt_context)
        self.status, self.interrupt_reason = change.status, change.interrupt_reason
        self.interrupt_context = change.interrupt_context

    def values(self) -> tuple[object, ...]:
        """The stored fields in :data:`STORED_FIELDS` order."""
        return _stored_values(self)


assert tuple(f.name for f in fields(EncodedCheckpoint)) == (*STORED_FIELDS, "seq")
_stored_values = attrgetter(*STORED_FIELDS)
#: A checkpoint's fields, read in one call (``stored`` copies them without ``__init__``).
_CHECKPOINT_FIELDS = tuple(f.name for f in fields(Checkpoint))
_checkpoint_values = attrgetter(*_CHECKPOINT_FIELDS)
# EncodedCheckpoint.decode lists a checkpoint's values in this order.
assert (
    *("thread_id", "node_id", "state", "checkpoint_id", "namespace", "run_id"),
    *("parent_checkpoint_id", "runner", "agent_id", "agent_path", "step", "step_type"),
    *("status", "node_input", "node_output", "iteration", "iteration_counters"),
    *("interrupt_reason", "interrupt_context", "created_at", "metadata", "project_id"),
    *("seq", "size_bytes"),
) == _CHECKPOINT_FIELDS
#: The slot setters of a checkpoint's fields, in field order (see :func:`_checkpoint_of`).
_CHECKPOINT_SETTERS = tuple(Checkpoint.__dict__[name].__set__ for name in _CHECKPOINT_FIELDS)


#: The range of a stored integer (every store's column is signed 64-bit).
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _beyond_64_bits(row: EncodedCheckpoint, name: str, number: int) -> CodecError:
    return CodecError(
        f"cannot read back checkpoint {row.checkpoint_id[:80]!r} of thread "
        f"{row.thread_id[:80]!r}: its {name} {number} does not fit in 64 bits, which no store "
        "writes; the row was damaged or not written by durability, restore it from a copy",
        path=name,
    )


def _checkpoint_of(values: Iterable[object]) -> Checkpoint:
    """A checkpoint of ``values`` (its fields in order), built without ``__init__``.

    For a checkpoint whose fields were checked when it was put (a decoded row, a put's return):
    the frozen dataclass's ``__init__`` and its checks were a quarter of a SQLite read.
    """
    cp = object.__new__(Checkpoint)
    for set_field, value in zip(_CHECKPOINT_SETTERS, values, strict=True):
        set_field(cp, value)
    return cp


@dataclass(slots=True)
class EncodedWrite:
    """A pending write as stores keep it (``value`` codec-encoded)."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    value: str
    task_path: str

    def decode(self, value: str | None = None) -> PendingWrite:
        """The pending write this row holds (``value``: the opened text of a sealed one; a
        sealed value left unopened comes back as :class:`~durability.crypto.Sealed`)."""
        text = self.value if value is None else value
        return PendingWrite(
            thread_id=self.thread_id,
            namespace=self.namespace,
            checkpoint_id=self.checkpoint_id,
            task_id=self.task_id,
            idx=self.idx,
            channel=self.channel,
            value=Sealed(text)
            if text.startswith(ENVELOPE_PREFIX)
            else codec.loads(text, path=f"writes[{self.task_id!r}, {self.idx}]"),
            task_path=self.task_path,
        )

    @classmethod
    def encode(cls, w: PendingWrite) -> EncodedWrite:
        """Encode ``w``; a refused value names the write."""
        value = codec.dumps(w.value, path=f"writes[{w.task_id!r}, {w.idx}]")
        return cls(
            w.thread_id,
            w.namespace,
            w.checkpoint_id,
            w.task_id,
            w.idx,
            w.channel,
            value,
            w.task_path,
        )


@dataclass(slots=True)
class SaverRow:
    """The stored fields a checkpoint saver maps, still encoded (see ``stores/saver_read.py``):
    a SQL store reads only these columns for it."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    step_type: str | None
    state: str
    metadata: str


#: The fields of :class:`SaverRow`, in order.
SAVER_FIELDS = tuple(f.name for f in fields(SaverRow))


def _state_text(state: object) -> str:
    return state.text if type(state) is Sealed else codec.dumps(state, path="state")


#: The stored fields of a pending write, in order.
WRITE_FIELDS = tuple(f.name for f in fields(EncodedWrite))


class CheckpointRow(Protocol):
    """What a read primitive returns: a stored checkpoint, decoded on demand.

    :class:`EncodedCheckpoint` is one; a foreign (read-only) store returns rows of its own.
    """

    @property
    def thread_id(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def checkpoint_id(self) -> str: ...

    def decode(self) -> Checkpoint: ...


class WriteRow(Protocol):
    """What a pending-write read returns: a stored pending write, decoded on demand."""

    def decode(self) -> PendingWrite: ...


#: What a caller of ``latest`` is doing, for messages (:attr:`Select.action` of its query).
LATEST = "read the latest checkpoint"


@dataclass(frozen=True, slots=True)
class Select:
    """Which of a thread's checkpoints :meth:`Store._select` returns, and in what order.

    * ``namespace``: only that namespace; ``None`` for every namespace.
    * ``checkpoint_id``: only the checkpoint with that id (at most one row).
    * ``after_seq``: only rows written after that ``seq``.
    * ``before_id``: only rows whose ``checkpoint_id`` sorts below it (code point order).
    * ``order``: ``"seq"`` (write order, oldest first), ``"seq_desc"`` (newest first) or
      ``"id_desc"`` (greatest ``checkpoint_id`` first, LangGraph's order).
    * ``limit``: at most that many rows.
    """

    thread_id: str
    namespace: str | None = ""
    checkpoint_id: str | None = None
    after_seq: int | None = None
    before_id: str | None = None
    order: Literal["seq", "seq_desc", "id_desc"] = "seq"
    limit: int | None = None

    @property
    def action(self) -> str:
        """What a caller asking this is doing, for messages: ``read the latest checkpoint``, …"""
        if self.checkpoint_id is not None:
            return "read a checkpoint"
        if self.order == "id_desc":
            return "list a thread's checkpoints"
        if self.order == "seq_desc" and self.limit == 1:
            return LATEST
        return "read a thread's history"

    def matches(self, row: CheckpointRow, seq: int | None) -> bool:
        """Whether ``row`` (written as ``seq``) passes the filters; for stores that filter in Python."""
        return (
            (self.namespace is None or row.namespace == self.namespace)
            and (self.checkpoint_id is None or row.checkpoint_id == self.checkpoint_id)
            and (self.after_seq is None or (seq or 0) > self.after_seq)
            and (self.before_id is None or row.checkpoint_id < self.before_id)
        )


#: A checkpoint's address inside its thread: ``(namespace, checkpoint_id)``.
CheckpointKey = tuple[str, str]

#: A checkpoint's address in a store: ``(thread_id, namespace, checkpoint_id)``.
CheckpointAddress = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A stored checkpoint's new status and interrupt fields (the context as codec text)."""

    status: str
    interrupt_reason: str | None
    interrupt_context: str


def stored(cp: Checkpoint, row: EncodedCheckpoint, seq: int) -> Checkpoint:
    """What a put returns: ``cp`` with what the store filled in.

    Not decoded back from ``row`` (decoding what was just encoded cost a third of a SQLite
    put): its values are the caller's own objects. A read returns them decoded, which is
    equal for every type the codec keeps except the two it reads back as another type (an
    exception as a ``CheckpointedException``, pydantic's parsed offset as a
    ``datetime.timezone``).
    """
    row.seq = seq
    if type(cp) is not Checkpoint:  # a subclass may check more in its __init__
        return cp.evolve(
            checkpoint_id=row.checkpoint_id,
            created_at=row.created_at,
            seq=seq,
            size_bytes=row.size_bytes,
        )
    # A field-by-field copy: ``cp`` was checked when it was built, so ``replace``'s call of
    # ``__init__`` and its checks (a tenth of a SQLite put) would only repeat them.
    values = list(_checkpoint_values(cp))
    values[_FILLED[0]] = row.checkpoint_id
    values[_FILLED[1]] = as_utc(row.created_at)
    values[_FILLED[2]] = seq
    values[_FILLED[3]] = row.size_bytes
    return _checkpoint_of(values)


#: Where the fields a store fills in sit among a checkpoint's fields.
_FILLED = tuple(
    _CHECKPOINT_FIELDS.index(name) for name in ("checkpoint_id", "created_at", "seq", "size_bytes")
)


def utf8_len(text: str) -> int:
    """How many bytes ``text`` takes in a store (lone surrogates count as they are kept)."""
    return len(text.encode("utf-8", "surrogatepass"))
