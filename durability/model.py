"""The checkpoint model shared by every store, the outbox, the plane and the analysis layer.

All times are aware UTC datetimes. A store fills ``seq`` (write order: "latest" is the highest
``seq`` in a thread and namespace, never a comparison of timestamps), ``size_bytes`` (the encoded
payload size) and, when missing, ``checkpoint_id`` and ``created_at``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from durability.clock import as_utc
from durability.errors import ConfigError

# Statuses the runner and the plane know; stores accept any string.
COMPLETED = "completed"
INTERRUPTED = "interrupted"
FAILED = "failed"

#: The ``metadata`` key holding the runner's ownership facts of a run.
RUN_METADATA = "run"
#: The key of a ``hitl_pause`` row's run facts holding its park's deadline (ISO 8601), so a
#: restore from the plane re-creates the park with the deadline the ask declared.
PARK_DEADLINE = "park_deadline"

# Step types (fastaiagent's vocabulary plus LangGraph's).
STEP_RUN_START = "run_start"  # the runner's first row of a run: its input state
STEP_NODE = "node"
STEP_HITL_PAUSE = "hitl_pause"
STEP_FORK_ORIGIN = "fork_origin"
STEP_RUN_END = "run_end"
STEP_LANGGRAPH = "langgraph"


def _aware(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if value is not None:
        object.__setattr__(obj, name, as_utc(value))


def _int64(obj: object, *names: str) -> None:
    """Refuse an integer field no store column can hold (they are signed 64-bit)."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise ConfigError(
                f"cannot use {type(obj).__name__}.{name}={value}: it does not fit in 64 bits, "
                "which every store's column holds; keep it between -2**63 and 2**63 - 1"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """One saved step of a run: enough to resume it.

    Only ``thread_id`` is required; every other field has a default. ``runner`` is the name of
    the chain or agent that wrote it, ``step`` the node index, ``namespace`` LangGraph's ``checkpoint_ns``.
    """

    thread_id: str
    node_id: str = ""
    state: Any = field(default_factory=dict)
    checkpoint_id: str = ""
    namespace: str = ""
    run_id: str = ""
    parent_checkpoint_id: str | None = None
    runner: str = ""
    agent_id: str | None = None
    agent_path: str | None = None
    step: int = 0
    step_type: str | None = None
    status: str = COMPLETED
    node_input: Any = field(default_factory=dict)
    node_output: Any = field(default_factory=dict)
    iteration: int = 0
    iteration_counters: dict[str, int] = field(default_factory=dict)
    interrupt_reason: str | None = None
    interrupt_context: Any = field(default_factory=dict)
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    project_id: str = ""
    seq: int | None = None
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        _aware(self, "created_at")
        _int64(self, "step", "iteration")

    @property
    def is_run_end(self) -> bool:
        """True for the terminal checkpoint of a run."""
        return self.step_type == STEP_RUN_END

    def evolve(self, **changes: Any) -> Checkpoint:
        """A copy with ``changes`` applied (the model is immutable)."""
        return replace(self, **changes)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWrite:
    """A value a task produced against a checkpoint before the next one (LangGraph's writes).

    ``idx`` orders a task's writes; special channels use a fixed negative ``idx`` and overwrite,
    regular writes keep the first value written for a ``(task_id, idx)``.
    """

    thread_id: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    value: Any = None
    namespace: str = ""
    task_path: str = ""

    def __post_init__(self) -> None:
        _int64(self, "idx")


@dataclass(frozen=True, slots=True, kw_only=True)
class Park:
    """A run waiting on an async ask, resumable later by any worker that can read the store.

    ``deadline_source`` is ``"declared"`` when the asker gave the deadline, ``"horizon"`` when
    it was taken from the thread's waiting horizon (a park restored from a plane that carries
    no deadline).
    """

    thread_id: str
    deadline: datetime
    run_id: str = ""
    checkpoint_id: str = ""
    node_id: str = ""
    runner: str = ""
    reason: str = ""
    context: Any = field(default_factory=dict)
    created_at: datetime | None = None
    deadline_source: str = "declared"

    def __post_init__(self) -> None:
        _aware(self, "deadline")
        _aware(self, "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A running run's claim on its thread; renewed by heartbeat, void after ``expires_at``."""

    thread_id: str
    holder: str
    expires_at: datetime
    run_id: str = ""
    acquired_at: datetime | None = None

    def __post_init__(self) -> None:
        _aware(self, "expires_at")
        _aware(self, "acquired_at")

    def live(self, now: datetime) -> bool:
        """Whether the lease still protects the thread at ``now``."""
        return as_utc(now) < self.expires_at


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadRecord:
    """What a store knows about one thread: its ledger record and its checkpoint totals.

    Ledger fields (``owner`` … ``lease``) are ``None`` for a thread no run ever recorded a
    start on (e.g. one written by a foreign tool). ``due_at`` is when a finished thread becomes
    due for the sweep, fixed when it was marked.
    """

    thread_id: str
    owner: str | None = None
    run_id: str | None = None
    started_at: datetime | None = None
    declared_waiting: timedelta | None = None
    declared_finished: timedelta | None = None
    finished_at: datetime | None = None
    due_at: datetime | None = None
    lease: Lease | None = None
    checkpoints: int = 0
    size_bytes: int = 0
    newest_at: datetime | None = None
    newest_seq: int | None = None

    def __post_init__(self) -> None:
        for name in ("started_at", "finished_at", "due_at", "newest_at"):
            _aware(self, name)

    @property
    def finished(self) -> bool:
        """Whether the thread is in the finished set."""
        return self.finished_at is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Tombstone:
    """What keeps an erased thread erased: no user data, only a keyed hash of its id.

    ``hash`` is the HMAC-SHA-256 of the thread id under the store's erasure secret (its first
    32 hex digits); ``erased_by`` is who asked, as they named themselves; ``receipt`` the
    erasure's receipt as JSON (it never holds the thread id).
    """

    hash: str
    erased_at: datetime
    erased_by: str = ""
    receipt: str = ""

    def __post_init__(self) -> None:
        _aware(self, "erased_at")


@dataclass(frozen=True, slots=True)
class Deleted:
    """What a delete removed."""

    checkpoints: int = 0
    writes: int = 0

    def __add__(self, other: Deleted) -> Deleted:
        return Deleted(self.checkpoints + other.checkpoints, self.writes + other.writes)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxEntry:
    """A checkpoint's replication state, without its payload.

    ``synced`` with no ``sync_error`` means the plane has it (or it predates replication);
    ``synced`` with a ``sync_error`` means quarantined: the plane refused it and said why.
    """

    thread_id: str
    checkpoint_id: str
    namespace: str
    seq: int
    project_id: str
    created_at: datetime
    size_bytes: int
    synced: bool
    sync_error: str | None = None
    attempts: int = 0
    last_error: str | None = None
    synced_at: datetime | None = None
    step_type: str | None = None
    #: When a released row became pending again (``None``: pending since it was written).
    pending_since: datetime | None = None

    @property
    def quarantined(self) -> bool:
        """True when the plane refused the row on payload grounds."""
        return self.synced and self.sync_error is not None

    @property
    def state(self) -> str:
        """``pending``, ``synced`` or ``quarantined``."""
        if not self.synced:
            return "pending"
        return "quarantined" if self.sync_error is not None else "synced"


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A value kept as another serializer's typed bytes: ``(type, data)``, never decoded here.

    The LangGraph saver stores channel values and pending writes this way when it is given a
    LangGraph ``serde`` (an ``EncryptedSerializer``, say), so the bytes that serializer wrote
    are stored and handed back to it unchanged. Foreign LangGraph stores use it for a value
    LangGraph's serializer could not read at all.
    """

    type: str
    data: bytes
