"""The store contract every provider implements.

A provider implements a small set of primitives (the abstract ``_``-methods and the ledger,
park and delete operations that must be atomic in the backend); everything a caller uses is
built on them here, once: id validation, encoding through the codec, filling ids and times,
the park rules and the lazy format-generation check. A refused operation is refused here,
before the backend is touched, so it leaves the store as it was.

Optional capabilities are declared in :class:`Capabilities`. The outbox (replication) is one:
a store whose outbox primitives raise :class:`~durability.errors.CapabilityError` simply does
not replicate, which is never an error for its callers (seed 000 "Custom checkpointers").
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

from durability import codec
from durability.clock import Clock, system_clock, to_micros
from durability.errors import (
    CapabilityError,
    CheckpointNotFound,
    CheckpointStoreFormatError,
    ConfigError,
    InvalidIdError,
    ParkRefused,
)
from durability.model import (
    INTERRUPTED,
    STEP_HITL_PAUSE,
    Checkpoint,
    Deleted,
    Lease,
    OutboxEntry,
    Park,
    PendingWrite,
    ThreadRecord,
)
from durability.settings import (
    Retention,
    Settings,
    check_park_deadline,
    due_at,
    parse_duration,
)

#: The store format generation this version writes (seed 004 "The store format").
FORMAT_GENERATION = 1

#: Longest id a store accepts; longer ones are refused before anything is written.
MAX_ID_LENGTH = 65_536

#: An outbox row's identity: the thread and the checkpoint's ``seq``.
RowKey = tuple[str, int]

#: Called with the store after a write of unreplicated rows commits (see ``add_write_listener``).
WriteListener = Callable[["Store"], None]

#: A chunk of an analysis read: column name -> that column's values, a numpy object array
#: (see ``checkpoint_columns``).
Columns = dict[str, Any]

#: The columns of :meth:`Store.checkpoint_columns` (times in microseconds since the epoch).
CHECKPOINT_COLUMNS = (
    "thread_id",
    "namespace",
    "run_id",
    "checkpoint_id",
    "seq",
    "node_id",
    "step",
    "step_type",
    "status",
    "created_at",
    "size_bytes",
    "synced",
    "sync_error",
    "runner",
)

#: The columns of :meth:`Store.thread_columns` (times and durations in microseconds).
THREAD_COLUMNS = (
    "thread_id",
    "checkpoints",
    "size_bytes",
    "first_at",
    "newest_at",
    "max_idle_gap",
    "status",
    "newest_run_id",
    "owner",
    "run_id",
    "started_at",
    "finished_at",
    "due_at",
    "declared_waiting",
    "declared_finished",
    "lease_holder",
    "lease_expires_at",
)

#: The columns of :meth:`Store.outbox_columns` (times in microseconds since the epoch).
OUTBOX_COLUMNS = (
    "thread_id",
    "namespace",
    "checkpoint_id",
    "seq",
    "project_id",
    "created_at",
    "synced_at",
    "size_bytes",
    "synced",
    "sync_error",
    "attempts",
    "last_error",
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider can do beyond the base contract.

    * ``shared``: readable by any worker on any host (postgres, redis).
    * ``sweeps_waiting``: the sweep deletes threads idle past their waiting horizon
      (postgres, sqlite); elsewhere a key TTL (redis) or the process lifetime (memory) does.
    * ``ttl``: every write re-applies the thread's waiting retention as a key TTL (redis).
    * ``replicates``: keeps an outbox the replication drain can send to a plane.
    * ``can_park``: may hold a parked run (a shared store, or SQLite opened with
      ``single_worker=True``).
    """

    shared: bool = False
    sweeps_waiting: bool = False
    ttl: bool = False
    replicates: bool = False
    can_park: bool = False


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of :meth:`Store.threads`; pass ``cursor`` back for the next page (``None``: done)."""

    records: list[ThreadRecord]
    cursor: str | None


@dataclass(slots=True)
class EncodedCheckpoint:
    """A checkpoint as stores keep it: scalar fields plus codec-encoded payload texts."""

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
        store fills them); the result must have both.
        """
        texts = {
            "state": codec.dumps(cp.state, path="state"),
            "node_input": codec.dumps(cp.node_input, path="node_input"),
            "node_output": codec.dumps(cp.node_output, path="node_output"),
            "iteration_counters": codec.dumps(cp.iteration_counters, path="iteration_counters"),
            "interrupt_context": codec.dumps(cp.interrupt_context, path="interrupt_context"),
            "metadata": codec.dumps(cp.metadata, path="metadata"),
        }
        created_at = created_at or cp.created_at
        assert created_at is not None
        return cls(
            thread_id=cp.thread_id,
            namespace=cp.namespace,
            checkpoint_id=checkpoint_id or cp.checkpoint_id,
            run_id=cp.run_id,
            parent_checkpoint_id=cp.parent_checkpoint_id,
            runner=cp.runner,
            agent_id=cp.agent_id,
            agent_path=cp.agent_path,
            node_id=cp.node_id,
            step=cp.step,
            step_type=cp.step_type,
            status=cp.status,
            iteration=cp.iteration,
            interrupt_reason=cp.interrupt_reason,
            created_at=created_at,
            project_id=cp.project_id,
            state=texts["state"],
            node_input=texts["node_input"],
            node_output=texts["node_output"],
            iteration_counters=texts["iteration_counters"],
            interrupt_context=texts["interrupt_context"],
            metadata=texts["metadata"],
            size_bytes=sum(len(t.encode("utf-8", "surrogatepass")) for t in texts.values()),
        )

    def decode(self) -> Checkpoint:
        """The checkpoint this row holds; a payload that cannot be read back fails the read."""
        return Checkpoint(
            thread_id=self.thread_id,
            namespace=self.namespace,
            checkpoint_id=self.checkpoint_id,
            run_id=self.run_id,
            parent_checkpoint_id=self.parent_checkpoint_id,
            runner=self.runner,
            agent_id=self.agent_id,
            agent_path=self.agent_path,
            node_id=self.node_id,
            step=self.step,
            step_type=self.step_type,
            status=self.status,
            iteration=self.iteration,
            interrupt_reason=self.interrupt_reason,
            created_at=self.created_at,
            project_id=self.project_id,
            state=codec.loads(self.state, path="state"),
            node_input=codec.loads(self.node_input, path="node_input"),
            node_output=codec.loads(self.node_output, path="node_output"),
            iteration_counters=codec.loads(self.iteration_counters, path="iteration_counters"),
            interrupt_context=codec.loads(self.interrupt_context, path="interrupt_context"),
            metadata=codec.loads(self.metadata, path="metadata"),
            seq=self.seq,
            size_bytes=self.size_bytes,
        )


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

    def decode(self) -> PendingWrite:
        """The pending write this row holds."""
        return PendingWrite(
            thread_id=self.thread_id,
            namespace=self.namespace,
            checkpoint_id=self.checkpoint_id,
            task_id=self.task_id,
            idx=self.idx,
            channel=self.channel,
            value=codec.loads(self.value, path=f"writes[{self.task_id!r}, {self.idx}]"),
            task_path=self.task_path,
        )


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
    """What :meth:`Store._writes` returns: a stored pending write, decoded on demand."""

    def decode(self) -> PendingWrite: ...


#: A checkpoint's address inside its thread: ``(namespace, checkpoint_id)``.
CheckpointKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Connection:
    """A store's record that it replicates a project to a plane (no secret is kept).

    A disconnect keeps the record, with ``disconnected_at`` set: the rows the plane does not
    have yet still belong to it and are sent at the next connect. Only an operator's
    ``durability outbox forget`` removes it.
    """

    project_id: str
    target: str
    connected_at: datetime
    disconnected_at: datetime | None = None
    #: When a drain of the project last ran (its heartbeat; a crash leaves it to age).
    seen_at: datetime | None = None
    #: When the plane last acknowledged a batch of the project's rows.
    acked_at: datetime | None = None

    @property
    def open(self) -> bool:
        """Whether a process is connected (as far as the record knows: a crash leaves it open)."""
        return self.disconnected_at is None


@dataclass(frozen=True, slots=True)
class OutboxSummary:
    """One project's unsent rows, counted without reading the synced ones: pending rows and
    their stored bytes, the oldest pending row's time, and quarantined rows."""

    project_id: str
    pending: int = 0
    pending_bytes: int = 0
    oldest_pending_at: datetime | None = None
    quarantined: int = 0


def check_id(value: object, what: str, *, action: str, allow_empty: bool = False) -> str:
    """Refuse an id a store cannot hold: not a string, empty, containing NUL, or huge."""
    if not isinstance(value, str):
        raise InvalidIdError(
            f"cannot {action}: {what} must be a string, got {type(value).__name__}; pass str(value)"
        )
    if not value and not allow_empty:
        raise InvalidIdError(f"cannot {action}: {what} is empty; give a non-empty id")
    if "\x00" in value:
        raise InvalidIdError(
            f"cannot {action}: {what} {_short(value)} contains a NUL character, which no store "
            "can index; remove it (NUL is fine inside state)"
        )
    if _has_lone_surrogate(value):
        raise InvalidIdError(
            f"cannot {action}: {what} {_short(value)} contains a lone surrogate (half of a UTF-16 "
            "pair), which no store can index; pass valid text (lone surrogates are fine inside state)"
        )
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"cannot {action}: {what} is {len(value)} characters, over the {MAX_ID_LENGTH}-character "
            "limit; use a shorter id (a hash of the long one, say)"
        )
    return value


#: How many values one statement, IN list or script batch of a store takes.
CHUNK = 500
_T = TypeVar("_T")


def chunks(values: list[_T], size: int = CHUNK) -> Iterator[list[_T]]:
    """``values`` in consecutive slices of at most ``size``."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


def check_ids(values: Sequence[str], what: str, *, action: str) -> None:
    """:func:`check_id` on every value, in one pass over their joined text when all are fine.

    The sweep checks each id it deletes twice; one by one, that was a tenth of a Postgres
    sweep's Python time. Python's UTF-8 codec refuses every surrogate code point, so two
    halves that meet in the joined text are still caught.
    """
    if all(isinstance(v, str) and 0 < len(v) <= MAX_ID_LENGTH for v in values):
        joined = "".join(values)
        if "\x00" not in joined and not _has_lone_surrogate(joined):
            return
    for value in values:
        check_id(value, what, action=action)


def _has_lone_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _short(value: str, limit: int = 60) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"… ({len(value)} chars)"


class Store(ABC):
    """A checkpoint store. Open one with :func:`durability.open`; use it as a context manager.

    Every public method validates its arguments before touching the backend, so a refused
    call leaves the store unchanged. The format generation is checked lazily, on first use.
    """

    #: Provider name: ``memory``, ``sqlite``, ``postgres``, ``redis``.
    provider: str = ""
    capabilities: Capabilities = Capabilities()

    def __init__(
        self, *, url: str, settings: Settings | None = None, clock: Clock | None = None
    ) -> None:
        self.url = url
        self.settings = settings if settings is not None else Settings.from_env()
        self.clock: Clock = clock if clock is not None else system_clock
        self._ready = False
        self._ready_lock = threading.Lock()
        self._write_listeners: list[WriteListener] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_url(self.url)}>"

    def close(self) -> None:  # noqa: B027 - providers without resources need nothing
        """Release connections. The store may not be used afterwards."""

    def ready(self) -> None:
        """Set up the backend and check its format generation, once (idempotent).

        A store holding checkpoints written in another generation, or with no recorded
        generation, is refused with :class:`CheckpointStoreFormatError`.
        """
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            self._setup()
            generation = self._read_generation()
            if generation is None:
                if self._has_any_checkpoint():
                    # Another handle may have recorded it and written since we read: a store is
                    # refused only if its checkpoints still have no generation beside them.
                    generation = self._read_generation()
                    if generation is None:
                        raise self._format_error(
                            "holds checkpoints but records no format generation"
                        )
                else:
                    self._write_generation(FORMAT_GENERATION)
            if generation is not None and generation != FORMAT_GENERATION:
                raise self._format_error(f"was written in format generation {generation}")
            self._ready = True

    def _format_error(self, what: str) -> CheckpointStoreFormatError:
        return CheckpointStoreFormatError(
            f"cannot use the checkpoint store {redact_url(self.url)}: it {what}, and this version "
            f"reads generation {FORMAT_GENERATION}; reset the checkpoint store before starting "
            f"this version: durability store reset {redact_url(self.url)}"
        )

    def reset(self) -> None:
        """Delete everything the store holds and record the current format generation."""
        self._setup()
        self._wipe()
        self._write_generation(FORMAT_GENERATION)
        self._ready = True

    # ------------------------------------------------------------------ checkpoints

    def put(self, checkpoint: Checkpoint, *, synced: bool = False) -> Checkpoint:
        """Store ``checkpoint`` and return it as stored: ``seq`` and ``size_bytes`` filled.

        The returned checkpoint carries the payload objects passed in (a read returns equal
        ones, decoded from the store). An empty ``checkpoint_id`` gets a fresh UUID and a missing ``created_at`` the store's
        clock. An id already stored in the thread and namespace raises
        :class:`~durability.errors.CheckpointConflict`. ``synced=True`` writes the row as
        already replicated (a restore writes what the plane already has).
        """
        return self.put_many([checkpoint], synced=synced)[0]

    def put_many(
        self, checkpoints: Sequence[Checkpoint], *, synced: bool = False
    ) -> list[Checkpoint]:
        """Store several checkpoints in one transaction, in order: all or none."""
        self.ready()
        rows = [self._prepare(cp, action="put a checkpoint") for cp in checkpoints]
        if not rows:
            return []
        seqs = self._insert(rows, synced=synced)
        if not synced:
            self._notify_write()
        return [
            self._stored(cp, row, seq) for cp, row, seq in zip(checkpoints, rows, seqs, strict=True)
        ]

    def _prepare(self, cp: Checkpoint, *, action: str) -> EncodedCheckpoint:
        check_id(cp.thread_id, "thread_id", action=action)
        check_id(cp.namespace, "namespace", action=action, allow_empty=True)
        check_id(cp.checkpoint_id, "checkpoint_id", action=action, allow_empty=True)
        check_id(cp.run_id, "run_id", action=action, allow_empty=True)
        check_id(cp.project_id, "project_id", action=action, allow_empty=True)
        if cp.parent_checkpoint_id is not None:
            check_id(
                cp.parent_checkpoint_id, "parent_checkpoint_id", action=action, allow_empty=True
            )
        return EncodedCheckpoint.encode(
            cp,
            checkpoint_id=cp.checkpoint_id or str(uuid.uuid4()),
            created_at=cp.created_at if cp.created_at is not None else self.clock(),
        )

    @staticmethod
    def _stored(cp: Checkpoint, row: EncodedCheckpoint, seq: int) -> Checkpoint:
        """What a put returns: ``cp`` with what the store filled in.

        Not decoded back from ``row`` (decoding what was just encoded cost a third of a SQLite
        put): its values are the caller's own objects. A read returns them decoded, which is
        equal for every type the codec keeps except the two it reads back as another type (an
        exception as a ``CheckpointedException``, pydantic's parsed offset as a
        ``datetime.timezone``).
        """
        row.seq = seq
        return cp.evolve(
            checkpoint_id=row.checkpoint_id,
            created_at=row.created_at,
            seq=seq,
            size_bytes=row.size_bytes,
        )

    def latest(self, thread_id: str, namespace: str = "") -> Checkpoint | None:
        """The last checkpoint written in the thread and namespace (highest ``seq``), or ``None``."""
        self._check_thread(thread_id, namespace, "read the latest checkpoint")
        self.ready()
        row = self._latest(thread_id, namespace)
        return None if row is None else row.decode()

    def get(self, thread_id: str, checkpoint_id: str, namespace: str = "") -> Checkpoint:
        """One checkpoint by id; :class:`~durability.errors.CheckpointNotFound` if absent."""
        self._check_thread(thread_id, namespace, "read a checkpoint")
        check_id(checkpoint_id, "checkpoint_id", action="read a checkpoint")
        self.ready()
        row = self._get(thread_id, namespace, checkpoint_id)
        if row is None:
            raise CheckpointNotFound(
                f"no checkpoint {_short(checkpoint_id)} in thread {_short(thread_id)}"
                + (f" namespace {_short(namespace)}" if namespace else "")
                + f" of {redact_url(self.url)}; list the thread with `durability threads show`"
            )
        return row.decode()

    def history(
        self,
        thread_id: str,
        namespace: str | None = "",
        *,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Checkpoint]:
        """The thread's checkpoints, oldest first (``seq`` order).

        ``namespace=None`` returns every namespace; ``after_seq`` and ``limit`` page.
        """
        self._check_thread(thread_id, namespace or "", "read a thread's history")
        self.ready()
        return [row.decode() for row in self._history(thread_id, namespace, after_seq, limit)]

    def has_thread(self, thread_id: str) -> bool:
        """Whether the store holds any checkpoint of the thread."""
        self._check_thread(thread_id, "", "look up a thread")
        self.ready()
        return self._latest_any(thread_id) is not None

    def put_writes(self, writes: Sequence[PendingWrite]) -> None:
        """Store pending writes with LangGraph's rules.

        A regular write (``idx >= 0``) keeps the first value stored for its
        ``(thread, namespace, checkpoint, task_id, idx)``; a special-channel write
        (``idx < 0``) overwrites.
        """
        self.ready()
        rows = []
        for w in writes:
            action = "store a pending write"
            self._check_thread(w.thread_id, w.namespace, action)
            check_id(w.checkpoint_id, "checkpoint_id", action=action)
            check_id(w.task_id, "task_id", action=action, allow_empty=True)
            check_id(w.channel, "channel", action=action, allow_empty=True)
            check_id(w.task_path, "task_path", action=action, allow_empty=True)
            rows.append(
                EncodedWrite(
                    thread_id=w.thread_id,
                    namespace=w.namespace,
                    checkpoint_id=w.checkpoint_id,
                    task_id=w.task_id,
                    idx=w.idx,
                    channel=w.channel,
                    value=codec.dumps(w.value, path=f"writes[{w.task_id!r}, {w.idx}]"),
                    task_path=w.task_path,
                )
            )
        if rows:
            self._insert_writes(rows)

    def writes(self, thread_id: str, checkpoint_id: str, namespace: str = "") -> list[PendingWrite]:
        """The pending writes against a checkpoint, in write order."""
        self._check_thread(thread_id, namespace, "read pending writes")
        check_id(checkpoint_id, "checkpoint_id", action="read pending writes")
        self.ready()
        return [row.decode() for row in self._writes(thread_id, namespace, checkpoint_id)]

    def threads(self, *, cursor: str | None = None, limit: int = 1000) -> ThreadPage:
        """One page of threads with their ledger records and checkpoint totals."""
        if limit < 1:
            raise InvalidIdError(f"cannot list threads: limit={limit} must be at least 1")
        self.ready()
        return self._thread_page(cursor, limit)

    def iter_threads(self, *, page_size: int = 1000) -> Iterator[ThreadRecord]:
        """Every thread, page by page."""
        cursor: str | None = None
        while True:
            page = self.threads(cursor=cursor, limit=page_size)
            yield from page.records
            if page.cursor is None:
                return
            cursor = page.cursor

    def thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread's ledger record and totals, or ``None`` if the store knows nothing of it."""
        self._check_thread(thread_id, "", "look up a thread")
        self.ready()
        return self._thread_record(thread_id)

    def delete_thread(self, thread_id: str) -> Deleted:
        """Remove every checkpoint, pending write, park, ledger record and outbox row of the thread."""
        self._check_thread(thread_id, "", "delete a thread")
        self.ready()
        return self._delete_thread(thread_id)

    def finished_due(self, now: datetime | None = None) -> list[ThreadRecord]:
        """Threads marked finished whose due time is at or before ``now``, earliest due first.

        What the sweep deletes first (seed 004). Providers answer it from an index of the
        finished set; this default walks every thread.
        """
        self.ready()
        return sorted(self._finished_due(now or self.clock()), key=_due_order)

    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        return [r for r in self.iter_threads() if r.due_at is not None and r.due_at <= now]

    def delete_checkpoints(self, thread_id: str, checkpoints: Sequence[CheckpointKey]) -> Deleted:
        """Remove these checkpoints of the thread and their pending writes (absent ones are skipped).

        ``checkpoints`` are ``(namespace, checkpoint_id)`` pairs. The thread's ledger record
        stays. LangGraph's ``prune`` and ``delete_for_runs`` are built on this.
        """
        action = "delete checkpoints"
        self._check_thread(thread_id, "", action)
        for namespace, checkpoint_id in checkpoints:
            check_id(namespace, "namespace", action=action, allow_empty=True)
            check_id(checkpoint_id, "checkpoint_id", action=action)
        self.ready()
        keys = list(dict.fromkeys(checkpoints))
        return self._delete_checkpoints(thread_id, keys) if keys else Deleted()

    def checkpoints_of_runs(self, run_ids: Iterable[str]) -> list[tuple[str, str, str]]:
        """``(thread_id, namespace, checkpoint_id)`` of every checkpoint whose ``run_id`` is listed.

        An empty run id is refused: it would match every checkpoint written without one.
        """
        wanted = [check_id(r, "run_id", action="find the checkpoints of runs") for r in run_ids]
        self.ready()
        return self._checkpoints_of_runs(list(dict.fromkeys(wanted))) if wanted else []

    def set_status(
        self,
        thread_id: str,
        checkpoint_id: str,
        namespace: str = "",
        *,
        status: str,
        interrupt_reason: str | None = None,
        interrupt_context: Any = None,
    ) -> bool:
        """Change a stored checkpoint's status and interrupt fields; ``False`` if it is absent.

        The only change a store makes to a stored checkpoint: a LangGraph checkpoint is
        ``interrupted`` while an ``__interrupt__`` write against it is pending, and goes back
        to ``completed`` when the run resumes. Replication is not re-triggered: the plane
        keeps the status the row had when it was sent (its ingest is insert-only).
        """
        action = "change a checkpoint's status"
        self._check_thread(thread_id, namespace, action)
        check_id(checkpoint_id, "checkpoint_id", action=action)
        check_id(status, "status", action=action)
        context = codec.dumps(
            {} if interrupt_context is None else interrupt_context, path="interrupt_context"
        )
        self.ready()
        return self._set_status(
            thread_id, namespace, checkpoint_id, status, interrupt_reason, context
        )

    def newest_first(
        self,
        thread_id: str,
        namespace: str | None = None,
        *,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[Checkpoint]:
        """The thread's checkpoints by ``checkpoint_id``, greatest first (LangGraph's order).

        LangGraph's ids are time-ordered UUIDv6 strings and its "latest" is the greatest id in
        a thread and namespace, compared as strings (code point order). ``before`` keeps ids
        below it; ``namespace=None`` returns every namespace.
        """
        self._check_thread(thread_id, namespace or "", "list a thread's checkpoints")
        if before is not None:
            check_id(before, "before", action="list a thread's checkpoints")
        self.ready()
        return [row.decode() for row in self._newest_first(thread_id, namespace, before, limit)]

    def writes_of(
        self, thread_id: str, checkpoints: Sequence[CheckpointKey]
    ) -> dict[CheckpointKey, list[PendingWrite]]:
        """The pending writes of several checkpoints of a thread at once, each in write order."""
        self._check_thread(thread_id, "", "read pending writes")
        self.ready()
        keys = list(dict.fromkeys(checkpoints))
        rows = self._writes_of(thread_id, keys) if keys else {}
        return {key: [w.decode() for w in rows.get(key, ())] for key in keys}

    # ------------------------------------------------------------------ ledger

    def record_run_start(
        self,
        thread_id: str,
        *,
        run_id: str,
        owner: str,
        retention: Retention | None = None,
    ) -> ThreadRecord:
        """Record a run starting on the thread: its owner and declared retention.

        A later run on the same thread replaces the declared retention (seed 004). This does
        not touch the finished mark; consumers call :meth:`unmark_finished` themselves.
        """
        action = "record a run start"
        self._check_thread(thread_id, "", action)
        check_id(run_id, "run_id", action=action, allow_empty=True)
        check_id(owner, "owner", action=action, allow_empty=True)
        self.ready()
        self._ledger_start(thread_id, run_id, owner, retention or Retention(), self.clock())
        record = self._thread_record(thread_id)
        assert record is not None
        return record

    def mark_finished(self, thread_id: str) -> ThreadRecord:
        """Put the thread in the finished set, due from the retention in force now."""
        self._check_thread(thread_id, "", "mark a thread finished")
        self.ready()
        now = self.clock()
        record = self._thread_record(thread_id)
        declared = retention_of(record)
        self._ledger_mark(thread_id, now, due_at(self.settings, declared, now))
        marked = self._thread_record(thread_id)
        assert marked is not None
        return marked

    def unmark_finished(self, thread_id: str) -> None:
        """Take the thread out of the finished set (a no-op if it is not in it)."""
        self._check_thread(thread_id, "", "unmark a finished thread")
        self.ready()
        self._ledger_unmark(thread_id)

    def acquire_lease(
        self, thread_id: str, holder: str, ttl: timedelta | str, *, run_id: str = ""
    ) -> Lease:
        """Take the thread's lease for ``ttl``; :class:`~durability.errors.LeaseHeld` if another holds a live one.

        The same holder may take it again (that renews it).
        """
        action = "take a lease"
        self._check_thread(thread_id, "", action)
        check_id(holder, "lease holder", action=action)
        ttl = _check_positive(ttl, "lease ttl", action)
        self.ready()
        now = self.clock()
        return self._lease_acquire(thread_id, holder, run_id, now, _after(now, ttl, action))

    def renew_lease(self, thread_id: str, holder: str, ttl: timedelta | str) -> Lease:
        """Extend the caller's lease; :class:`~durability.errors.LeaseLost` if it is not theirs any more."""
        action = "renew a lease"
        self._check_thread(thread_id, "", action)
        check_id(holder, "lease holder", action=action)
        ttl = _check_positive(ttl, "lease ttl", action)
        self.ready()
        now = self.clock()
        return self._lease_renew(thread_id, holder, now, _after(now, ttl, action))

    def release_lease(self, thread_id: str, holder: str) -> None:
        """Drop the caller's lease (a no-op if it is not theirs)."""
        self._check_thread(thread_id, "", "release a lease")
        check_id(holder, "lease holder", action="release a lease")
        self.ready()
        self._lease_release(thread_id, holder)

    # ------------------------------------------------------------------ parks

    def park(
        self,
        checkpoint: Checkpoint,
        *,
        deadline: datetime | None,
        reason: str = "",
        context: Any = None,
    ) -> tuple[Checkpoint, Park]:
        """Park a run: store its interrupted checkpoint and its pending park, atomically.

        Refused before anything is written when the store cannot hold a park, when the ask has
        no deadline, when the deadline is past the thread's waiting horizon, or when the
        thread already has a pending park.
        """
        self.ready()
        return self._park_with(
            checkpoint, deadline=deadline, reason=reason, context=context, source="declared"
        )

    def _park_with(
        self,
        checkpoint: Checkpoint,
        *,
        deadline: datetime | None,
        reason: str,
        context: Any,
        source: str,
        synced: bool = False,
    ) -> tuple[Checkpoint, Park]:
        thread_id = checkpoint.thread_id
        self._check_can_park(thread_id)
        self._check_thread(thread_id, checkpoint.namespace, "park a run")
        now = self.clock()
        check_park_deadline(
            self.settings,
            retention_of(self._thread_record(thread_id)),
            thread_id=thread_id,
            now=now,
            deadline=deadline,
        )
        assert deadline is not None
        context = {} if context is None else context
        cp = checkpoint.evolve(
            status=INTERRUPTED,
            step_type=checkpoint.step_type or STEP_HITL_PAUSE,
            interrupt_reason=reason,
            interrupt_context=context,
        )
        row = self._prepare(cp, action="park a run")
        park = Park(
            thread_id=thread_id,
            deadline=deadline,
            run_id=cp.run_id,
            checkpoint_id=row.checkpoint_id,
            node_id=cp.node_id,
            runner=cp.runner,
            reason=reason,
            context=context,
            created_at=row.created_at,
            deadline_source=source,
        )
        seq = self._insert_park(row, park, synced=synced)
        if not synced:
            self._notify_write()
        return self._stored(cp, row, seq), park

    def _check_can_park(self, thread_id: str) -> None:
        if not self.capabilities.can_park:
            hint = (
                "open it with single_worker=True if the worker that resumes runs on this host"
                if self.provider == "sqlite"
                else "use a shared store (postgres or redis) for runs that park"
            )
            raise ParkRefused(
                f"refusing to park thread {_short(thread_id)}: the {self.provider} store "
                f"{redact_url(self.url)} cannot hold a parked run (a paused run must be readable "
                f"by whichever worker resumes it); {hint}"
            )

    def claim_park(self, thread_id: str) -> Park | None:
        """Atomically take the thread's pending park: exactly one of any number of claimers gets it."""
        self._check_thread(thread_id, "", "claim a park")
        self.ready()
        return self._claim_park(thread_id)

    def get_park(self, thread_id: str) -> Park | None:
        """The thread's pending park, or ``None``."""
        self._check_thread(thread_id, "", "read a park")
        self.ready()
        return self._get_park(thread_id)

    def parks(self) -> list[Park]:
        """Every pending park, oldest deadline first."""
        self.ready()
        return sorted(self._parks(), key=lambda p: p.deadline)

    # ------------------------------------------------------------------ write listeners

    def add_write_listener(self, listener: WriteListener) -> None:
        """Call ``listener(store)`` after every committed write of unreplicated rows.

        ``put``, ``put_many`` and ``park`` call it after their commit (not for ``synced=True``
        writes, which have nothing to send). It runs on the writer's thread, so it must be quick
        and must not block: the replication drain uses it to set an event. An exception it
        raises is logged and never reaches the writer.
        """
        if listener not in self._write_listeners:
            self._write_listeners.append(listener)

    def remove_write_listener(self, listener: WriteListener) -> None:
        """Stop calling ``listener`` (a no-op if it was not added)."""
        if listener in self._write_listeners:
            self._write_listeners.remove(listener)

    def _notify_write(self) -> None:
        for listener in tuple(self._write_listeners):
            try:
                listener(self)
            except Exception:  # a listener must never fail the write that already committed
                logger.exception("a write listener of %r failed", self)

    # ------------------------------------------------------------------ outbox (optional)

    def fetch_unsynced(
        self, *, limit: int = 200, max_bytes: int | None = None, project_id: str | None = None
    ) -> list[Checkpoint]:
        """The oldest un-replicated checkpoints (write order), at most ``limit`` rows.

        ``max_bytes`` caps the batch by ``size_bytes`` (the first row always fits);
        ``project_id`` limits it to one project.
        """
        return [
            row.decode()
            for row in self.fetch_unsynced_encoded(
                limit=limit, max_bytes=max_bytes, project_id=project_id
            )
        ]

    def fetch_unsynced_encoded(
        self,
        *,
        limit: int = 200,
        max_bytes: int | None = None,
        project_id: str | None = None,
        exclude: Collection[RowKey] = (),
    ) -> list[EncodedCheckpoint]:
        """:meth:`fetch_unsynced` without decoding: the rows as stored (payloads as codec text).

        The replication drain sends these texts as they are, so a row is never decoded (and a
        class in its state never needs to be importable) on its way to the plane. Rows in
        ``exclude`` are skipped: the drain fetches the next batch while one is in flight.
        """
        self.ready()
        return self._fetch_unsynced(limit, max_bytes, project_id, exclude)

    def mark_synced(self, keys: Iterable[RowKey]) -> None:
        """Record that the plane has these rows (idempotent)."""
        self.ready()
        self._mark_synced(list(keys), self.clock())

    def mark_sent(self, keys: Iterable[RowKey]) -> None:
        """Record that one request delivered these rows: :meth:`record_attempt` without an
        error and :meth:`mark_synced`, in one write where the store can (the drain's ack)."""
        self.ready()
        self._mark_sent(list(keys), self.clock())

    def mark_quarantined(self, reasons: Mapping[RowKey, str]) -> None:
        """Record rows the plane refused on payload grounds, with its reason (idempotent)."""
        self.ready()
        self._mark_quarantined(dict(reasons), self.clock())

    def record_attempt(self, keys: Iterable[RowKey], error: str | None) -> None:
        """Count one send attempt on these rows, with the error it met (``None``: it went through)."""
        self.ready()
        self._record_attempt(list(keys), error)

    def release(self, keys: Iterable[RowKey] | None = None) -> int:
        """Put quarantined rows back in the outbox (all of them when ``keys`` is ``None``)."""
        self.ready()
        return self._release(None if keys is None else list(keys))

    def outbox(
        self,
        *,
        state: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[OutboxEntry]:
        """Outbox entries (no payloads) in write order; ``state`` is pending, synced or quarantined."""
        if state not in (None, "pending", "synced", "quarantined"):
            raise InvalidIdError(
                f"cannot list the outbox: state={state!r} is not one of pending, synced, quarantined"
            )
        if thread_id is not None:
            self._check_thread(thread_id, "", "list the outbox")
        self.ready()
        return self._outbox(state, project_id, thread_id, after_seq, limit)

    def record_connection(self, project_id: str, target: str) -> None:
        """Record that this store replicates ``project_id`` to ``target`` (never the key)."""
        check_id(project_id, "project_id", action="record a connection", allow_empty=True)
        self.ready()
        self._record_connection(Connection(project_id, target, self.clock()))

    def record_disconnection(self, project_id: str) -> None:
        """Mark ``project_id``'s connection closed, keeping the record (a no-op without one).

        The store still replicates: what the plane lacks waits for the next connect, and the
        sweep and ``durability threads delete`` keep it meanwhile.
        """
        self.ready()
        for record in self._connections():
            if record.project_id == project_id:
                self._record_connection(replace(record, disconnected_at=self.clock()))

    def forget_connection(self, project_id: str) -> None:
        """Remove the record of a connection: the operator gives up replicating that project.

        Once no record is left the store no longer replicates, and nothing keeps the rows the
        plane lacks from the sweep, ``durability threads delete`` or Redis's TTL.
        """
        self.ready()
        self._forget_connection(project_id)

    def connections(self) -> list[Connection]:
        """The projects this store replicates: every connection recorded, open or closed."""
        self.ready()
        return self._connections()

    def record_heartbeat(self, project_id: str, *, acked_at: datetime | None = None) -> None:
        """Record that a drain of ``project_id`` is alive now (and, with ``acked_at``, when the
        plane last acknowledged its rows) in the connection's record; a no-op without one."""
        self.ready()
        self._record_heartbeat(project_id, self.clock(), acked_at)

    def outbox_summary(self) -> list[OutboxSummary]:
        """Per project, its pending and quarantined rows (see :class:`OutboxSummary`), read
        without touching synced rows: cheap enough to serve on every metrics scrape."""
        self.ready()
        return self._outbox_summary()

    @property
    def replicates(self) -> bool:
        """Whether the store was ever connected to a plane, and the connection not forgotten since.

        A store never connected does not replicate: nothing keeps its unsent rows from the
        sweep (a deployment without a plane must be able to sweep), and those still held at a
        first connect are sent then.
        """
        return self.capabilities.replicates and bool(self.connections())

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _check_thread(thread_id: str, namespace: str, action: str) -> None:
        check_id(thread_id, "thread_id", action=action)
        check_id(namespace, "namespace", action=action, allow_empty=True)

    def _no_outbox(self) -> CapabilityError:
        return CapabilityError(
            f"the {self.provider or type(self).__name__} store keeps no outbox, so it does not replicate"
        )

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _setup(self) -> None:
        """Create or migrate the backend's structures; idempotent and safe to race."""

    @abstractmethod
    def _read_generation(self) -> int | None: ...

    @abstractmethod
    def _write_generation(self, generation: int) -> None: ...

    @abstractmethod
    def _has_any_checkpoint(self) -> bool: ...

    @abstractmethod
    def _wipe(self) -> None:
        """Delete every record the store holds."""

    @abstractmethod
    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        """Insert rows atomically and return their ``seq``; refuse all on a duplicate id."""

    @abstractmethod
    def _latest(self, thread_id: str, namespace: str) -> CheckpointRow | None: ...

    @abstractmethod
    def _latest_any(self, thread_id: str) -> CheckpointRow | None:
        """The last checkpoint of the thread in any namespace."""

    @abstractmethod
    def _get(self, thread_id: str, namespace: str, checkpoint_id: str) -> CheckpointRow | None: ...

    @abstractmethod
    def _history(
        self, thread_id: str, namespace: str | None, after_seq: int | None, limit: int | None
    ) -> Sequence[CheckpointRow]: ...

    @abstractmethod
    def _insert_writes(self, rows: list[EncodedWrite]) -> None: ...

    @abstractmethod
    def _writes(self, thread_id: str, namespace: str, checkpoint_id: str) -> Sequence[WriteRow]: ...

    @abstractmethod
    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage: ...

    @abstractmethod
    def _thread_record(self, thread_id: str) -> ThreadRecord | None: ...

    @abstractmethod
    def _delete_thread(self, thread_id: str) -> Deleted: ...

    @abstractmethod
    def _ledger_start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None: ...

    @abstractmethod
    def _ledger_mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None: ...

    @abstractmethod
    def _ledger_unmark(self, thread_id: str) -> None: ...

    @abstractmethod
    def _lease_acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        """Atomically take the lease unless another holder's lease is live at ``now``."""

    @abstractmethod
    def _lease_renew(
        self, thread_id: str, holder: str, now: datetime, expires_at: datetime
    ) -> Lease:
        """Atomically extend the lease if ``holder`` still holds it."""

    @abstractmethod
    def _lease_release(self, thread_id: str, holder: str) -> None: ...

    @abstractmethod
    def _insert_park(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        """Insert the interrupted checkpoint and its park atomically; refuse if a park exists."""

    @abstractmethod
    def _claim_park(self, thread_id: str) -> Park | None: ...

    @abstractmethod
    def _get_park(self, thread_id: str) -> Park | None: ...

    @abstractmethod
    def _parks(self) -> list[Park]: ...

    # Primitives with defaults built on the ones above; providers override them for speed.

    def _newest_first(
        self, thread_id: str, namespace: str | None, before: str | None, limit: int | None
    ) -> Sequence[CheckpointRow]:
        rows = sorted(
            (
                r
                for r in self._history(thread_id, namespace, None, None)
                if before is None or r.checkpoint_id < before
            ),
            key=lambda r: r.checkpoint_id,
            reverse=True,
        )
        return rows if limit is None else rows[:limit]

    def _writes_of(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> Mapping[CheckpointKey, Sequence[WriteRow]]:
        return {(ns, cid): self._writes(thread_id, ns, cid) for ns, cid in keys}

    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[tuple[str, str, str]]:
        wanted = set(run_ids)
        found = []
        for record in self.iter_threads():
            for row in self._history(record.thread_id, None, None, None):
                cp = row.decode()
                if cp.run_id in wanted:
                    found.append((cp.thread_id, cp.namespace, cp.checkpoint_id))
        return found

    # Primitives a provider must implement for LangGraph's prune, delete_for_runs and
    # interrupts; the defaults say it cannot.

    def _set_status(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        status: str,
        interrupt_reason: str | None,
        interrupt_context: str,
    ) -> bool:
        raise CapabilityError(
            f"the {self.provider or type(self).__name__} store cannot change a stored "
            "checkpoint's status; implement Store._set_status for it"
        )

    def _delete_checkpoints(self, thread_id: str, keys: list[CheckpointKey]) -> Deleted:
        raise CapabilityError(
            f"the {self.provider or type(self).__name__} store cannot delete single "
            "checkpoints; implement Store._delete_checkpoints for it (delete_thread works)"
        )

    # Outbox primitives: optional. The defaults say the store does not replicate.

    def _fetch_unsynced(
        self, limit: int, max_bytes: int | None, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        raise self._no_outbox()

    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        raise self._no_outbox()

    def _mark_sent(self, keys: list[RowKey], now: datetime) -> None:
        # Two writes by default; a store that can flip both in one statement overrides this.
        self._record_attempt(keys, None)
        self._mark_synced(keys, now)

    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        raise self._no_outbox()

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        raise self._no_outbox()

    def _release(self, keys: list[RowKey] | None) -> int:
        raise self._no_outbox()

    def _outbox(
        self,
        state: str | None,
        project_id: str | None,
        thread_id: str | None,
        after_seq: int | None,
        limit: int | None,
    ) -> list[OutboxEntry]:
        raise self._no_outbox()

    def _record_connection(self, connection: Connection) -> None:
        raise self._no_outbox()

    def _forget_connection(self, project_id: str) -> None:
        raise self._no_outbox()

    def _connections(self) -> list[Connection]:
        return []

    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        for record in self._connections():
            if record.project_id == project_id:
                acked = acked_at or record.acked_at
                self._record_connection(replace(record, seen_at=seen_at, acked_at=acked))

    def _outbox_summary(self) -> list[OutboxSummary]:
        totals: dict[str, list[Any]] = {}
        for state in ("pending", "quarantined"):
            for e in self._outbox(state, None, None, None, None):
                t = totals.setdefault(e.project_id, [0, 0, None, 0])
                if state == "quarantined":
                    t[3] += 1
                    continue
                t[0] += 1
                t[1] += e.size_bytes
                t[2] = e.created_at if t[2] is None else min(t[2], e.created_at)
        return [OutboxSummary(p, *t) for p, t in sorted(totals.items())]

    # ---- analysis reads
    # Column reads for durability.frames: scalar fields only, never a payload decoded, in
    # chunks of column lists so a store of millions of checkpoints is never held as objects.
    # The defaults below are built on the primitives above; providers override the private
    # ``_…_columns`` methods to aggregate in the backend (SQL GROUP BY, Redis pipelines).

    def checkpoint_columns(
        self,
        thread_id: str | None = None,
        *,
        columns: Sequence[str] = CHECKPOINT_COLUMNS,
        chunk_size: int = 50_000,
    ) -> Iterator[Columns]:
        """Every checkpoint's scalar fields (``columns`` of :data:`CHECKPOINT_COLUMNS`), in chunks.

        Times are microseconds since the epoch; ``synced`` is ``None`` in a store that keeps
        no outbox. Rows come in write order within a thread; payloads are never decoded.
        Asking for fewer columns lets a SQL store read less.
        """
        if thread_id is not None:
            self._check_thread(thread_id, "", "read checkpoint columns")
        unknown = [c for c in columns if c not in CHECKPOINT_COLUMNS]
        if unknown:
            raise InvalidIdError(
                f"cannot read checkpoint columns: {unknown!r} are not among {list(CHECKPOINT_COLUMNS)}"
            )
        _check_chunk(chunk_size, "read checkpoint columns")
        self.ready()
        wanted = tuple(columns)
        return (
            {name: chunk[name] for name in wanted}
            for chunk in self._checkpoint_columns(thread_id, wanted, chunk_size)
        )

    def thread_columns(self, *, chunk_size: int = 50_000) -> Iterator[Columns]:
        """One row per thread (:data:`THREAD_COLUMNS`): totals, idle gaps, ledger, lease.

        ``max_idle_gap`` is the longest time between two consecutive checkpoints (write
        order) in microseconds, ``None`` for a thread with fewer than two; ``status`` and
        ``newest_run_id`` are those of the thread's last checkpoint.
        """
        _check_chunk(chunk_size, "read thread columns")
        self.ready()
        return self._thread_columns(chunk_size)

    def outbox_columns(self, *, chunk_size: int = 50_000) -> Iterator[Columns]:
        """Every outbox entry (:data:`OUTBOX_COLUMNS`), in chunks of columns.

        Raises :class:`~durability.errors.CapabilityError` when the store keeps no outbox.
        """
        _check_chunk(chunk_size, "read outbox columns")
        self.ready()
        return self._outbox_columns(chunk_size)

    def run_end_outputs(
        self, keys: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Any]:
        """``node_output`` of these ``(thread_id, namespace, checkpoint_id)`` checkpoints, decoded.

        Only that field is decoded (a run end records its status, reason and error there);
        absent checkpoints are left out.
        """
        for thread_id, namespace, checkpoint_id in keys:
            self._check_thread(thread_id, namespace, "read run ends")
            check_id(checkpoint_id, "checkpoint_id", action="read run ends")
        self.ready()
        return self._run_end_outputs(list(dict.fromkeys(keys))) if keys else {}

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        """Chunks holding at least ``columns`` (a provider may return all of them)."""
        states = self._outbox_states(thread_id)
        names = [thread_id] if thread_id is not None else [r.thread_id for r in self.iter_threads()]

        def rows() -> Iterator[tuple[Any, ...]]:
            for name in names:
                for row in self._history(name, None, None, None):
                    scalars = row_scalars(row)
                    synced, error = (
                        (None, None)
                        if states is None
                        else states.get((name, scalars[4]), (None, None))
                    )
                    yield (*scalars[:11], synced, error, scalars[11])

        return column_chunks(CHECKPOINT_COLUMNS, rows(), chunk_size)

    def _outbox_states(self, thread_id: str | None) -> dict[RowKey, tuple[bool, str | None]] | None:
        """``(synced, sync_error)`` by row, or ``None`` when the store keeps no outbox."""
        try:
            entries = self._outbox(None, None, thread_id, None, None)
        except CapabilityError:
            return None
        return {(e.thread_id, e.seq): (e.synced, e.sync_error) for e in entries}

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for record in self.iter_threads():
                scalars = [
                    row_scalars(r) for r in self._history(record.thread_id, None, None, None)
                ]
                yield thread_row(record, [(s[4], s[9], s[8], s[2]) for s in scalars])

        return column_chunks(THREAD_COLUMNS, rows(), chunk_size)

    def _outbox_columns(self, chunk_size: int) -> Iterator[Columns]:
        entries = self._outbox(None, None, None, None, None)
        rows = (
            (
                e.thread_id,
                e.namespace,
                e.checkpoint_id,
                e.seq,
                e.project_id,
                to_micros(e.created_at),
                None if e.synced_at is None else to_micros(e.synced_at),
                e.size_bytes,
                e.synced,
                e.sync_error,
                e.attempts,
                e.last_error,
            )
            for e in entries
        )
        return column_chunks(OUTBOX_COLUMNS, rows, chunk_size)

    def _run_end_outputs(self, keys: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], Any]:
        found: dict[tuple[str, str, str], Any] = {}
        for thread_id, namespace, checkpoint_id in keys:
            row = self._get(thread_id, namespace, checkpoint_id)
            if isinstance(row, EncodedCheckpoint):
                found[(thread_id, namespace, checkpoint_id)] = codec.loads(
                    row.node_output, path="node_output"
                )
            elif row is not None:
                found[(thread_id, namespace, checkpoint_id)] = row.decode().node_output
        return found

    # ---- sweep
    # What the checkpoint sweep (durability.sweep) needs: every thread read at once, several
    # threads deleted at once, and which threads the plane lacks rows of. The defaults are
    # built on the primitives above; the SQL store answers each with a few set-based queries.

    def sweep_records(self) -> list[ThreadRecord]:
        """Every thread the store knows, with its ledger record and checkpoint totals (any order).

        What the sweep plans from: unlike :meth:`iter_threads` it reads the store in one go.
        """
        self.ready()
        return self._sweep_records()

    def sweep_columns(self) -> SweepColumns:
        """What :meth:`sweep_records` reads, as numpy columns (one row per thread, any order).

        What the sweep plans from: :class:`SweepColumns` builds a row's :class:`ThreadRecord`
        only when asked (the live-thread filters are handed real records), so a plan of
        100,000 threads never holds 100,000 of them.
        """
        self.ready()
        return self._sweep_columns()

    def delete_order(self, thread_ids: Sequence[str]) -> list[str]:
        """These threads in the order the sweep should batch them for :meth:`delete_threads`.

        The default keeps the given order. The SQL store sorts by thread key, the leading
        column of the indexes a delete rewrites, so one batch's entries share index leaves.
        """
        return list(thread_ids)

    def delete_threads(self, thread_ids: Sequence[str]) -> dict[str, Deleted]:
        """Delete several threads as :meth:`delete_thread` does; what each held, by id.

        A thread the store does not hold removes nothing (``Deleted()``). The SQL store deletes
        in one transaction per call; others thread by thread.
        """
        ids = list(dict.fromkeys(thread_ids))
        check_ids(ids, "thread_id", action="delete threads")
        self.ready()
        return self._delete_threads(ids) if ids else {}

    def still_holding(self, thread_ids: Sequence[str]) -> set[str]:
        """Which of these threads hold a checkpoint or a pending write right now.

        The sweep asks after a delete round, to find the threads a writer raced. The SQL store
        answers with one query; the default cannot tell cheaply and answers every id, so the
        sweep deletes them once more and that round's delete is the check.
        """
        check_ids(thread_ids, "thread_id", action="check threads are empty")
        self.ready()
        return self._still_holding(list(dict.fromkeys(thread_ids))) if thread_ids else set()

    def unreplicated(self) -> dict[str, int]:
        """Per thread, how many of its checkpoints the plane does not have (pending or quarantined).

        Only threads with at least one such row appear; a store without an outbox has none.
        """
        if not self.capabilities.replicates:
            return {}
        self.ready()
        return self._unreplicated()

    def _sweep_records(self) -> list[ThreadRecord]:
        return list(self.iter_threads())

    def _sweep_columns(self) -> SweepColumns:
        records = self._sweep_records()
        return SweepColumns.of(
            [r.thread_id for r in records],
            [
                (
                    r.checkpoints,
                    r.size_bytes,
                    _micros(r.newest_at),
                    _micros(r.started_at),
                    _micros(r.finished_at),
                    _micros(r.due_at),
                    _span(r.declared_waiting),
                    _span(r.declared_finished),
                    None if r.lease is None else to_micros(r.lease.expires_at),
                )
                for r in records
            ],
            records.__getitem__,
        )

    def _delete_threads(self, thread_ids: list[str]) -> dict[str, Deleted]:
        return {thread_id: self._delete_thread(thread_id) for thread_id in thread_ids}

    def _still_holding(self, thread_ids: list[str]) -> set[str]:
        return set(thread_ids)

    def _unreplicated(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in ("pending", "quarantined"):
            for entry in self._outbox(state, None, None, None, None):
                counts[entry.thread_id] = counts.get(entry.thread_id, 0) + 1
        return counts


class SweepColumns:
    """Every thread the sweep plans over, as columns, and each row's record on demand.

    ``thread_id`` is an object array; ``checkpoints`` and ``size_bytes`` int64;
    ``newest_at``, ``started_at``, ``finished_at``, ``due_at`` and ``lease_expires_at``
    datetime64[us] (NaT where the record has none); ``declared_waiting`` and
    ``declared_finished`` timedelta64[us].
    :meth:`record` is the row's :class:`ThreadRecord`, equal to the one
    :meth:`Store.sweep_records` gives.
    """

    #: The columns after ``thread_id``, in the order :meth:`of` takes them.
    VALUES = (
        "checkpoints",
        "size_bytes",
        "newest_at",
        "started_at",
        "finished_at",
        "due_at",
        "declared_waiting",
        "declared_finished",
        "lease_expires_at",
    )

    def __init__(self, columns: Mapping[str, Any], record: Callable[[int], ThreadRecord]) -> None:
        self.columns = dict(columns)
        self.record = record

    def __len__(self) -> int:
        return len(self.columns["thread_id"])

    @classmethod
    def of(
        cls,
        thread_ids: Sequence[str],
        values: Iterable[Sequence[int | None]],
        record: Callable[[int], ThreadRecord],
    ) -> SweepColumns:
        """From ids and rows of :data:`VALUES` (times and spans in microseconds, or ``None``)."""
        import numpy as np

        ids = np.empty(len(thread_ids), dtype=object)
        ids[:] = thread_ids
        raw = columns_of(cls.VALUES, list(values))
        columns: dict[str, Any] = {"thread_id": ids}
        for name in cls.VALUES:
            column = raw[name]
            if name in ("checkpoints", "size_bytes"):
                columns[name] = np.where(column == None, 0, column).astype(np.int64)  # noqa: E711
                continue
            unit = "timedelta64[us]" if name.startswith("declared") else "datetime64[us]"
            missing = column == None  # noqa: E711 - elementwise on an object array
            micros = np.where(missing, np.iinfo(np.int64).min, column).astype(np.int64)
            columns[name] = micros.view(unit)  # int64's minimum is NaT
        return cls(columns, record)


def conflict_message(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    """The refusal for a checkpoint id already stored in the thread."""
    where = f"thread {thread_id[:80]!r}" + (f" namespace {namespace[:80]!r}" if namespace else "")
    return (
        f"cannot put checkpoint {checkpoint_id[:80]!r}: {where} already holds a checkpoint with "
        "that id, and stores never overwrite; give the new checkpoint a fresh id (or leave it empty)"
    )


def lease_held_message(thread_id: str, current: Lease) -> str:
    """The refusal for a lease another holder has."""
    return (
        f"cannot take the lease on thread {thread_id[:80]!r}: {current.holder!r} holds it until "
        f"{current.expires_at.isoformat()} (run {current.run_id!r}); wait for that run to end or "
        "its lease to expire"
    )


def lease_lost_message(thread_id: str, holder: str, current: Lease | None) -> str:
    """The refusal for renewing a lease the caller no longer holds."""
    now_held = f"{current.holder!r} holds it now" if current else "nobody holds it now"
    return (
        f"cannot renew the lease on thread {thread_id[:80]!r} for {holder!r}: the lease was lost "
        f"({now_held}); stop this run, it may be running elsewhere"
    )


def park_exists_message(thread_id: str) -> str:
    """The refusal for a second park on a thread."""
    return (
        f"refusing to park thread {thread_id[:80]!r}: it already has a pending park; resume or "
        "claim that one first"
    )


def _check_positive(value: timedelta | str, what: str, action: str) -> timedelta:
    """``value`` as a positive duration (a timedelta, or text such as ``30s`` or ``PT30S``)."""
    if isinstance(value, str):
        return parse_duration(value, name=what)
    if not isinstance(value, timedelta):
        raise ConfigError(
            f"cannot {action}: {what} {str(value)[:40]!r} must be a timedelta or a duration "
            "such as 30s or 5m"
        )
    if value <= timedelta(0):
        raise InvalidIdError(f"cannot {action}: {what} {value} must be positive")
    return value


def _after(now: datetime, span: timedelta, action: str) -> datetime:
    """``now + span``, refused by name when it passes the year 9999."""
    try:
        return now + span
    except OverflowError:
        raise ConfigError(
            f"cannot {action}: {span} from {now.isoformat()} is past the year 9999; use a "
            "shorter duration"
        ) from None


def _due_order(record: ThreadRecord) -> tuple[datetime, str]:
    assert record.due_at is not None
    return record.due_at, record.thread_id


def cap_bytes(rows: list[EncodedCheckpoint], max_bytes: int | None) -> list[EncodedCheckpoint]:
    """The longest prefix of ``rows`` within ``max_bytes`` of ``size_bytes``; the first row always fits."""
    if max_bytes is None:
        return rows
    kept: list[EncodedCheckpoint] = []
    total = 0
    for row in rows:
        if kept and total + row.size_bytes > max_bytes:
            break
        kept.append(row)
        total += row.size_bytes
    return kept


def retention_of(record: ThreadRecord | None) -> Retention | None:
    """The declared retention recorded in a thread's ledger record, if any."""
    if record is None or (record.declared_waiting is None and record.declared_finished is None):
        return None
    return Retention(waiting=record.declared_waiting, finished=record.declared_finished)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (URLs appear in messages and reprs)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    netloc, slash, path = rest.partition("/")
    userinfo, _, host = netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    masked = f"{user}:***" if colon else user
    return f"{scheme}://{masked}@{host}{slash}{path}"


# ---- analysis reads


def _check_chunk(chunk_size: int, action: str) -> None:
    if chunk_size < 1:
        raise InvalidIdError(f"cannot {action}: chunk_size={chunk_size} must be at least 1")


def columns_of(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> Columns:
    """Rows (tuples in ``names`` order) turned into columns: one numpy object array each.

    One 2-D object array is built in C and sliced, which is several times faster than
    transposing the tuples in Python (numpy is imported here, never by ``import durability``).
    """
    import numpy as np

    table = np.empty((len(rows), len(names)), dtype=object)
    if rows:
        table[:] = rows
    return {name: table[:, i] for i, name in enumerate(names)}


def column_chunks(
    names: Sequence[str], rows: Iterable[Sequence[Any]], chunk_size: int
) -> Iterator[Columns]:
    """``rows`` as chunks of at most ``chunk_size`` rows, each chunk as columns."""
    batch: list[Sequence[Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= chunk_size:
            yield columns_of(names, batch)
            batch = []
    if batch:
        yield columns_of(names, batch)


def row_scalars(row: CheckpointRow) -> tuple[Any, ...]:
    """A stored row's scalar fields (CHECKPOINT_COLUMNS without synced/sync_error, runner last).

    An encoded row is read as it is; a foreign row is the checkpoint it already mapped.
    """
    cp: Any = row if isinstance(row, EncodedCheckpoint) else row.decode()
    return (
        cp.thread_id,
        cp.namespace,
        cp.run_id,
        cp.checkpoint_id,
        cp.seq,
        cp.node_id,
        cp.step,
        cp.step_type,
        cp.status,
        None if cp.created_at is None else to_micros(cp.created_at),
        cp.size_bytes,
        cp.runner,
    )


def _micros(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def _span(value: timedelta | None) -> int | None:
    return None if value is None else value // timedelta(microseconds=1)


def idle_gap(created: Sequence[int | None]) -> int | None:
    """The longest time between consecutive entries of ``created`` (write order), or ``None``."""
    times = [t for t in created if t is not None]
    if len(times) < 2:
        return None
    return max(b - a for a, b in itertools.pairwise(times))


def thread_row(
    record: ThreadRecord, points: Sequence[tuple[int, int | None, str, str]]
) -> tuple[Any, ...]:
    """A THREAD_COLUMNS row from a thread record and its checkpoints' ``(seq, created_at, status, run_id)``."""
    ordered = sorted(points, key=lambda p: p[0])
    created = [p[1] for p in ordered]
    known = [t for t in created if t is not None]
    newest = ordered[-1] if ordered else None
    lease = record.lease
    return (
        record.thread_id,
        record.checkpoints,
        record.size_bytes,
        min(known) if known else None,
        _micros(record.newest_at)
        if record.newest_at is not None
        else (max(known) if known else None),
        idle_gap(created),
        newest[2] if newest else None,
        newest[3] if newest else None,
        record.owner,
        record.run_id,
        _micros(record.started_at),
        _micros(record.finished_at),
        _micros(record.due_at),
        _span(record.declared_waiting),
        _span(record.declared_finished),
        lease.holder if lease else None,
        _micros(lease.expires_at) if lease else None,
    )
