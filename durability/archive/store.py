"""``archive:///DIR``: the archives in a directory, opened as a read-only store.

Every archive file in the directory is loaded into memory when the store is first used (rows
stay encoded as the codec keeps them), so every read, frame and notebook works on what a sweep
deleted, and :func:`durability.copy` brings threads back into a store unchanged. A checkpoint
archived twice (a sweep killed between writing a batch and deleting it archives that batch
again next time) is kept once. Every write refuses with
:class:`~durability.errors.ReadOnlyStoreError`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from durability._util import redact_url
from durability.archive.format import read_archive
from durability.errors import ReadOnlyStoreError
from durability.model import Lease, ThreadRecord
from durability.settings import Retention
from durability.stores.base import FORMAT_GENERATION
from durability.stores.memory import MemoryLedger, MemoryStore
from durability.stores.readonly import ReadOnlyWrites
from durability.stores.rows import EncodedCheckpoint, EncodedWrite


class ArchiveStore(ReadOnlyWrites, MemoryStore):
    """The archives of a directory, read-only."""

    provider = "archive"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__("memory://", **kwargs)
        self.url = url
        # As sqlite:///: archive:///relative/dir and archive:////absolute/dir.
        rest = url.partition("://")[2]
        self.directory = Path(rest[1:] if rest.startswith("/") else rest or ".")
        self.ledger = ArchiveLedger(self)
        self.tombstones = None
        self._loaded = False

    def __repr__(self) -> str:
        return f"<ArchiveStore {redact_url(self.url)}>"

    def _setup(self) -> None:
        if self._loaded:
            return
        checkpoints: list[EncodedCheckpoint] = []
        writes: list[EncodedWrite] = []
        seen: set[tuple[str, str, str]] = set()
        for item in read_archive(self.directory):
            if isinstance(item, EncodedCheckpoint):
                key = (item.thread_id, item.namespace, item.checkpoint_id)
                if key not in seen:
                    seen.add(key)
                    checkpoints.append(item)
            elif isinstance(item, EncodedWrite):
                writes.append(item)
            else:
                self._load_record(item)
        MemoryStore._insert(self, checkpoints, synced=True)
        MemoryStore._insert_writes(self, writes)
        self._data.generation = FORMAT_GENERATION
        self._loaded = True

    def _load_record(self, r: ThreadRecord) -> None:
        ledger = MemoryLedger(self)
        if r.started_at is not None:
            retention = Retention(waiting=r.declared_waiting, finished=r.declared_finished)
            ledger._start(r.thread_id, r.run_id or "", r.owner or "", retention, r.started_at)
        if r.finished_at is not None and r.due_at is not None:
            ledger._mark(r.thread_id, r.finished_at, r.due_at)

    def refuse(self, action: str) -> ReadOnlyStoreError:
        return ReadOnlyStoreError(
            f"cannot {action}: the archive {redact_url(self.url)} is read-only; copy its threads "
            "into a store to change them (durability copy archive:///DIR URL)"
        )


class ArchiveLedger(MemoryLedger):
    """The archived ledger records, read-only."""

    store: ArchiveStore

    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        raise self.store.refuse("record a run start")

    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        raise self.store.refuse("mark a thread finished")

    def _unmark(self, thread_id: str) -> None:
        raise self.store.refuse("unmark a finished thread")

    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        raise self.store.refuse("take a lease")
