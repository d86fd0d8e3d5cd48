"""The store contract: a dozen primitives, and every checkpoint operation built on them.

A store author subclasses :class:`Store` and implements its abstract primitives (set up,
record the format generation, insert rows, one parametrised :class:`Select`, pending writes in
and out, a page of threads and one thread's record, delete, change a status, wipe). Everything
a caller uses is built on them here, once: id validation, encoding through the codec, filling
ids and times, and the lazy format-generation check. A refused operation is refused here,
before the backend is touched, so it leaves the store as it was.

Everything else is an opt-in capability with its own small interface, held in an attribute
that is ``None`` when the store lacks it:

==================  ========================================================================
``store.ledger``    :class:`~durability.stores.ledger.Ledger`: run starts, finished marks,
                    leases
``store.parks``     :class:`~durability.stores.parks.Parks`: parked runs and their atomic claim
``store.outbox``    :class:`~durability.stores.outbox.Outbox`: replication state and the
                    connection records
``store.scans``     :class:`~durability.stores.scans.Scans`: the analysis and sweep reads
                    (always present; generic defaults a backend overrides for speed)
``store.tombstones``:class:`~durability.stores.tombstones.Tombstones`: erased threads, whose
                    every later write the store refuses
==================  ========================================================================

The methods callers used before the capabilities had their own objects (``store.park``,
``store.mark_finished``, ``store.fetch_unsynced``, …) stay, delegating to the capability; on
a store that lacks it they raise the refusal they always raised.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from durability import codec
from durability._util import redact_url, short
from durability.clock import Clock, system_clock
from durability.crypto import Keyring, sealer_for
from durability.errors import CheckpointNotFound, CheckpointStoreFormatError, InvalidIdError
from durability.model import Checkpoint, Deleted, PendingWrite, ThreadRecord, Tombstone
from durability.settings import Settings
from durability.stores.bulk import BulkLoad
from durability.stores.delegate import DelegatingAliases
from durability.stores.erasure import ErasureReceipt, apply_erasure, plan_erasure
from durability.stores.ids import check_id, check_texts, check_thread
from durability.stores.ledger import Ledger
from durability.stores.listeners import WriteListeners
from durability.stores.outbox import Outbox
from durability.stores.parks import Parks
from durability.stores.rows import (
    LATEST,
    TEXT_FIELDS,
    CheckpointAddress,
    CheckpointKey,
    CheckpointRow,
    EncodedCheckpoint,
    EncodedWrite,
    SaverRow,
    Select,
    StatusChange,
    WriteRow,
    stored,
)
from durability.stores.scans import Scans
from durability.stores.sealing import (
    Reseal,
    open_checkpoint,
    open_write,
    seal_checkpoint,
    seal_write,
)
from durability.stores.tombstones import Tombstones

#: The store format generation this version writes (see :meth:`Store.ready`).
FORMAT_GENERATION = 1
#: What a put checks besides the thread's address (:func:`check_thread`).
_CHECKED_TEXTS = tuple(f for f in TEXT_FIELDS if f not in ("thread_id", "namespace"))


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider's deployment rules allow, beyond the capability objects it holds.

    * ``shared``: readable by any worker on any host (postgres, redis).
    * ``sweeps_waiting``: the sweep deletes threads idle past their waiting horizon
      (postgres, sqlite); elsewhere a key TTL (redis) or the process lifetime (memory) does.
    * ``ttl``: every write re-applies the thread's waiting retention as a key TTL (redis).
    * ``can_park``: may write a parked run (a shared store, or SQLite opened with
      ``single_worker=True``); a store may hold parks others wrote without it.
    """

    shared: bool = False
    sweeps_waiting: bool = False
    ttl: bool = False
    can_park: bool = False


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of :meth:`Store.threads`; pass ``cursor`` back for the next page (``None``: done)."""

    records: list[ThreadRecord]
    cursor: str | None


class Store(DelegatingAliases, WriteListeners, ABC):
    """A checkpoint store. Open one with :func:`durability.open`; use it as a context manager.

    Every public method validates its arguments before touching the backend, so a refused
    call leaves the store unchanged. The format generation is checked lazily, on first use.
    """

    #: Provider name: ``memory``, ``sqlite``, ``postgres``, ``redis``, or a foreign store's.
    provider: str = ""
    capabilities: Capabilities = Capabilities()
    #: The thread ledger, or ``None`` when the store keeps none.
    ledger: Ledger | None = None
    #: Parked runs, or ``None`` when the store can hold none.
    parks: Parks | None = None
    #: The replication outbox, or ``None`` when the store does not replicate.
    outbox: Outbox | None = None
    #: The analysis and sweep reads (generic unless the backend brings faster ones).
    scans: Scans
    #: Erased threads' tombstones, or ``None`` when the store cannot keep them (read-only).
    tombstones: Tombstones | None = None
    #: Loading many new rows at once (a copy's destination), or ``None``: written row by row.
    bulk: BulkLoad | None = None

    def __init__(
        self,
        *,
        url: str,
        settings: Settings | None = None,
        clock: Clock | None = None,
        keyring: Keyring | None = None,
        allow_plaintext: bool = False,
    ) -> None:
        super().__init__()
        self.url = url
        self.settings = settings if settings is not None else Settings.from_env()
        self.clock: Clock = clock if clock is not None else system_clock
        #: The customer's keys (``keyring=``, else ``DURABILITY_ENCRYPTION_KEYS``): with one, the
        #: state and pending-write values are sealed (see :mod:`durability.stores.sealing`).
        self.keyring = keyring if keyring is not None else Keyring.from_env()
        self.sealer = sealer_for(self.keyring) if self.keyring is not None else None
        #: Read payloads held in clear although the store encrypts (a migration's setting).
        self.allow_plaintext = allow_plaintext
        self.scans = Scans(self)
        self._ready = False
        self._ready_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_url(self.url)}>"

    def close(self) -> None:
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
        ones, decoded from the store). An empty ``checkpoint_id`` gets a fresh UUID and a
        missing ``created_at`` the store's clock. An id already stored in the thread and
        namespace raises :class:`~durability.errors.CheckpointConflict`. ``synced=True``
        writes the row as already replicated (a restore writes what the plane already has).
        """
        return self.put_many([checkpoint], synced=synced)[0]

    def put_many(
        self, checkpoints: Sequence[Checkpoint], *, synced: bool = False
    ) -> list[Checkpoint]:
        """Store several checkpoints in one transaction, in order: all or none."""
        rows, seqs = self._put_rows(checkpoints, synced)
        return [stored(cp, row, seq) for cp, row, seq in zip(checkpoints, rows, seqs, strict=True)]

    def _put_rows(
        self, checkpoints: Sequence[Checkpoint], synced: bool
    ) -> tuple[list[EncodedCheckpoint], list[int]]:
        """Prepare and insert ``checkpoints`` in one transaction; their rows and seqs."""
        self.ready()
        rows = [self.prepare(cp, action="put a checkpoint") for cp in checkpoints]
        if not rows:
            return [], []
        seqs = self._insert(rows, synced=synced)
        if not synced:
            self.notify_write()
        return rows, seqs

    def put_returning_seq(self, checkpoint: Checkpoint) -> int:
        """Store ``checkpoint`` as :meth:`put` does and return only its ``seq``: for a caller
        that keeps its own copy (the LangGraph saver), which then pays for no returned one."""
        return self._put_rows([checkpoint], synced=False)[1][0]

    def prepare(self, cp: Checkpoint, *, action: str) -> EncodedCheckpoint:
        """``cp`` checked and encoded as the store will keep it, its id and time filled in."""
        check_thread(cp.thread_id, cp.namespace, action)
        check_texts([(what, getattr(cp, what)) for what in _CHECKED_TEXTS], action=action)
        row = EncodedCheckpoint.encode(
            cp,
            checkpoint_id=cp.checkpoint_id or str(uuid.uuid4()),
            created_at=cp.created_at if cp.created_at is not None else self.clock(),
        )
        if self.sealer is not None:
            seal_checkpoint(self.sealer, row)
        return row

    def latest(self, thread_id: str, namespace: str = "") -> Checkpoint | None:
        """The last checkpoint written in the thread and namespace (highest ``seq``), or ``None``."""
        check_thread(thread_id, namespace, LATEST)
        self.ready()
        row = self._latest_row(thread_id, namespace)
        return None if row is None else open_checkpoint(self, row, LATEST)

    def get(self, thread_id: str, checkpoint_id: str, namespace: str = "") -> Checkpoint:
        """One checkpoint by id; :class:`~durability.errors.CheckpointNotFound` if absent."""
        check_thread(thread_id, namespace, "read a checkpoint")
        check_id(checkpoint_id, "checkpoint_id", action="read a checkpoint")
        self.ready()
        rows = self._select(Select(thread_id, namespace, checkpoint_id=checkpoint_id))
        if not rows:
            raise CheckpointNotFound(
                f"no checkpoint {short(checkpoint_id)} in thread {short(thread_id)}"
                + (f" namespace {short(namespace)}" if namespace else "")
                + f" of {redact_url(self.url)}; list the thread with `durability threads show`"
            )
        return open_checkpoint(self, rows[0], "read a checkpoint")

    def history(
        self,
        thread_id: str,
        namespace: str | None = "",
        *,
        after_seq: int | None = None,
        limit: int | None = None,
        keep_sealed: bool = False,
    ) -> list[Checkpoint]:
        """The thread's checkpoints, oldest first (``seq`` order).

        ``namespace=None`` returns every namespace; ``after_seq`` and ``limit`` page.
        ``keep_sealed=True`` leaves sealed states as :class:`~durability.crypto.Sealed` (no
        key needed, nothing refused): for readers of the clear fields only.
        """
        check_thread(thread_id, namespace or "", "read a thread's history")
        self.ready()
        query = Select(thread_id, namespace, after_seq=after_seq, limit=limit)
        rows = self._select(query)
        if keep_sealed:
            return [row.decode() for row in rows]
        return [open_checkpoint(self, row, query.action) for row in rows]

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
        check_thread(thread_id, namespace or "", "list a thread's checkpoints")
        if before is not None:
            check_id(before, "before", action="list a thread's checkpoints")
        self.ready()
        query = Select(thread_id, namespace, before_id=before, order="id_desc", limit=limit)
        return [open_checkpoint(self, row, query.action) for row in self._select(query)]

    def has_thread(self, thread_id: str) -> bool:
        """Whether the store holds any checkpoint of the thread."""
        check_thread(thread_id, "", "look up a thread")
        self.ready()
        return bool(self._select(Select(thread_id, None, order="seq_desc", limit=1)))

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
        check_thread(thread_id, namespace, action)
        check_id(checkpoint_id, "checkpoint_id", action=action)
        check_texts([("status", status), ("interrupt_reason", interrupt_reason)], action=action)
        context = codec.dumps(
            {} if interrupt_context is None else interrupt_context, path="interrupt_context"
        )
        self.ready()
        change = StatusChange(status, interrupt_reason, context)
        return self._set_status((thread_id, namespace, checkpoint_id), change)

    # ------------------------------------------------------------------ pending writes

    def put_writes(self, writes: Sequence[PendingWrite]) -> None:
        """Store pending writes with LangGraph's rules.

        A regular write (``idx >= 0``) keeps the first value stored for its
        ``(thread, namespace, checkpoint, task_id, idx)``; a special-channel write
        (``idx < 0``) overwrites.
        """
        self.ready()
        action = "store a pending write"
        rows = []
        for w in writes:
            check_thread(w.thread_id, w.namespace, action)
            check_id(w.checkpoint_id, "checkpoint_id", action=action)
            for what in ("task_id", "channel", "task_path"):
                check_id(getattr(w, what), what, action=action, allow_empty=True)
            row = EncodedWrite.encode(w)
            if self.sealer is not None:
                seal_write(self.sealer, row)
            rows.append(row)
        if rows:
            self._insert_writes(rows)

    def writes(self, thread_id: str, checkpoint_id: str, namespace: str = "") -> list[PendingWrite]:
        """The pending writes against a checkpoint, in write order."""
        check_thread(thread_id, namespace, "read pending writes")
        check_id(checkpoint_id, "checkpoint_id", action="read pending writes")
        self.ready()
        key = (namespace, checkpoint_id)
        found = self._select_writes(thread_id, [key]).get(key, ())
        return [open_write(self, row, "read pending writes") for row in found]

    def writes_of(
        self, thread_id: str, checkpoints: Sequence[CheckpointKey]
    ) -> dict[CheckpointKey, list[PendingWrite]]:
        """The pending writes of several checkpoints of a thread at once, each in write order."""
        check_thread(thread_id, "", "read pending writes")
        self.ready()
        keys = list(dict.fromkeys(checkpoints))
        rows = self._select_writes(thread_id, keys) if keys else {}
        action = "read pending writes"
        return {key: [open_write(self, w, action) for w in rows.get(key, ())] for key in keys}

    # ------------------------------------------------------------------ threads

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
        check_thread(thread_id, "", "look up a thread")
        self.ready()
        return self._thread_record(thread_id)

    def delete_thread(self, thread_id: str) -> Deleted:
        """Remove every checkpoint, pending write, park, ledger record and outbox row of the thread."""
        check_thread(thread_id, "", "delete a thread")
        self.ready()
        return self._delete(thread_id, None)

    def erase(self, thread_id: str, *, by: str = "") -> ErasureReceipt:
        """Erase the thread: every checkpoint, pending write, ledger record (mark, lease), park
        and outbox row (pending and quarantined ones dropped, never sent) goes, and a tombstone
        refuses every later write, atomically with the delete. Returns the receipt.

        ``by`` names who asked (kept in the tombstone). Idempotent: erasing an erased thread
        keeps the first tombstone and says ``already_erased``. The plane's copy is not touched
        here: :func:`durability.replication.erase_thread` asks the plane too.
        """
        return apply_erasure(self, plan_erasure(self, thread_id), by=by)

    def delete_checkpoints(self, thread_id: str, checkpoints: Sequence[CheckpointKey]) -> Deleted:
        """Remove these checkpoints of the thread and their pending writes (absent ones are skipped).

        ``checkpoints`` are ``(namespace, checkpoint_id)`` pairs. The thread's ledger record
        stays. LangGraph's ``prune`` and ``delete_for_runs`` are built on this.
        """
        action = "delete checkpoints"
        check_thread(thread_id, "", action)
        for namespace, checkpoint_id in checkpoints:
            check_id(namespace, "namespace", action=action, allow_empty=True)
            check_id(checkpoint_id, "checkpoint_id", action=action)
        self.ready()
        keys = list(dict.fromkeys(checkpoints))
        return self._delete(thread_id, keys) if keys else Deleted()

    def refuse_erased(self, thread_id: str, action: str) -> None:
        """Raise :class:`~durability.errors.ThreadErased` if the thread was erased (a read of
        its tombstone; the checkpoint puts check theirs atomically in the backend instead)."""
        if self.tombstones is not None:
            self.tombstones.refuse(thread_id, action)

    # ------------------------------------------------------------------ capabilities

    @property
    def replicates(self) -> bool:
        """Whether the store was ever connected to a plane, and the connection not forgotten since.

        A store never connected does not replicate: nothing keeps its unsent rows from the
        sweep (a deployment without a plane must be able to sweep), and those still held at a
        first connect are sent then.
        """
        return self.outbox is not None and bool(self.outbox.connections())

    def unreplicated(self) -> dict[str, int]:
        """Per thread, how many of its checkpoints the plane does not have; a store without an
        outbox has none (see :meth:`Outbox.unreplicated`)."""
        return {} if self.outbox is None else self.outbox.unreplicated()

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _setup(self) -> None:
        """Create or migrate the backend's structures; idempotent and safe to race."""

    @abstractmethod
    def _read_generation(self) -> int | None:
        """The format generation recorded in the store, or ``None``."""

    @abstractmethod
    def _write_generation(self, generation: int) -> None:
        """Record the format generation (idempotent)."""

    @abstractmethod
    def _wipe(self) -> None:
        """Delete every record the store holds, of every capability."""

    @abstractmethod
    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        """Insert rows atomically and return their ``seq``; refuse all on a duplicate id.

        ``seq`` is increasing within a thread and never reused, even after a delete. A
        duplicate ``(thread, namespace, checkpoint_id)`` — stored already, or twice in
        ``rows`` — raises :class:`~durability.errors.CheckpointConflict` and writes nothing.
        ``synced`` is for a store with an outbox: the rows need not be sent.
        """

    @abstractmethod
    def _select(self, query: Select) -> Sequence[CheckpointRow]:
        """The thread's rows that :class:`Select` asks for, in its order (empty if none)."""

    def _latest_row(self, thread_id: str, namespace: str) -> CheckpointRow | None:
        """The newest row of :meth:`latest` (a store with a statement for it overrides this)."""
        rows = self._select(Select(thread_id, namespace, order="seq_desc", limit=1))
        return rows[0] if rows else None

    def _select_with_writes(
        self, query: Select
    ) -> tuple[CheckpointRow | SaverRow, Sequence[WriteRow]] | None:
        """The first row ``query`` selects and its pending writes in write order, or ``None``
        (a SQL store reads both in one statement, and only a saver's columns)."""
        rows = self._select(query)
        if not rows:
            return None
        key = (rows[0].namespace, rows[0].checkpoint_id)
        return rows[0], list(self._select_writes(query.thread_id, [key]).get(key, ()))

    @abstractmethod
    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        """Store pending writes: a write with ``idx >= 0`` keeps the first value stored for its
        ``(thread, namespace, checkpoint, task_id, idx)``, one with ``idx < 0`` overwrites."""

    @abstractmethod
    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> Mapping[CheckpointKey, Sequence[WriteRow]]:
        """The pending writes against each of these checkpoints, in write order (absent keys
        may be left out)."""

    @abstractmethod
    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        """Up to ``limit`` threads after ``cursor`` (an opaque text the store chose), each with
        its totals and ledger record; ``cursor`` of the page is ``None`` on the last page."""

    @abstractmethod
    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        """The thread's totals and ledger record, or ``None`` if the store knows nothing of it."""

    @abstractmethod
    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        """Delete these checkpoints of the thread and their pending writes; with ``keys=None``,
        the whole thread: every checkpoint, pending write and record of every capability."""

    def _erase(self, thread_id: str, stone: Tombstone) -> tuple[Tombstone, Deleted]:
        """Tombstone the thread, then delete all of it; return the stored tombstone and counts.

        Correct where every put checks the tombstone atomically with its write (memory, Redis):
        from the tombstone on, nothing lands, so the delete finds the thread whole. A backend
        whose puts could slip between the two steps overrides this to do both in one.
        """
        assert self.tombstones is not None
        stored = self.tombstones._bury(thread_id, stone)
        return stored, self._delete(thread_id, None)

    @abstractmethod
    def _set_status(self, address: CheckpointAddress, change: StatusChange) -> bool:
        """Change one stored row's status and interrupt fields (``size_bytes`` follows the new
        context's length); ``False`` if the row is absent."""

    def _reseal(self, changes: Sequence[Reseal]) -> None:
        """Replace these checkpoints' state texts in one transaction, each only where it still
        holds ``old`` (re-encryption); ``size_bytes`` follows. Optional: the core providers have it."""
        raise self.missing("re-encryption", "re-encrypt checkpoints")

    def _has_any_checkpoint(self) -> bool:
        """Whether the store holds any checkpoint (a backend answers this in one read)."""
        cursor: str | None = None
        while True:  # the primitive, not iter_threads: this runs inside ready()
            page = self._thread_page(cursor, 1000)
            if any(record.checkpoints for record in page.records):
                return True
            if page.cursor is None:
                return False
            cursor = page.cursor


def conflict_message(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    """The refusal for a checkpoint id already stored in the thread."""
    where = f"thread {thread_id[:80]!r}" + (f" namespace {namespace[:80]!r}" if namespace else "")
    return (
        f"cannot put checkpoint {checkpoint_id[:80]!r}: {where} already holds a checkpoint with "
        "that id, and stores never overwrite; give the new checkpoint a fresh id (or leave it empty)"
    )
