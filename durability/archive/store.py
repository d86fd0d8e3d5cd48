"""``archive:///DIR``: the archives in a directory, opened as a read-only store, in bounded memory.

Opening reads each archive file's index (and, for the members an index does not list, the
archive itself, one gzip member at a time), and keeps only an index: per thread, the members
holding it, its checkpoint count, bytes, newest time and ledger record; per member, where it is
in its file. A thread's rows are read from its members when asked for (rows
stay encoded as the codec keeps them), and the few members read last are kept decoded, so
reading thread after thread (a copy, a frame) reads each member about once. Memory is the index
plus those members, whatever the archive's size.

Every read, frame and notebook works on what a sweep deleted, and :func:`durability.copy`
brings threads back into a store unchanged. A checkpoint archived twice (a sweep killed between
writing a batch and deleting it archives that batch again next time) is kept once. Every write
refuses with :class:`~durability.errors.ReadOnlyStoreError`.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from durability._util import redact_url
from durability.archive.format import (
    Member,
    ThreadSummary,
    archive_files,
    parse_member,
    read_index,
    read_member,
    scan_members,
    summarize,
)
from durability.errors import ReadOnlyStoreError
from durability.model import Lease, ThreadRecord
from durability.settings import Retention
from durability.stores.base import FORMAT_GENERATION, Store, ThreadPage
from durability.stores.ledger import Ledger
from durability.stores.readonly import ReadOnlyWrites
from durability.stores.rows import CheckpointKey, EncodedCheckpoint, EncodedWrite, Select

#: Decoded members kept at once (a sweep batch each).
MEMBERS_KEPT = 4

_ORDER = {
    "seq": (lambda r: r.seq or 0, False),
    "seq_desc": (lambda r: r.seq or 0, True),
    "id_desc": (lambda r: r.checkpoint_id, True),
}


@dataclass
class _Entry:
    """What the index keeps of one thread (``exact``: counted without duplicates)."""

    members: list[int] = field(default_factory=list)
    checkpoints: int = 0
    size_bytes: int = 0
    newest_at: datetime | None = None
    newest_seq: int | None = None
    ledger: ThreadRecord | None = None
    exact: bool = True


@dataclass
class _Rows:
    """A thread's rows in one member (its ledger record, if archived there)."""

    checkpoints: list[EncodedCheckpoint] = field(default_factory=list)
    writes: list[EncodedWrite] = field(default_factory=list)
    ledger: ThreadRecord | None = None


class ArchiveStore(ReadOnlyWrites, Store):
    """The archives of a directory, read-only."""

    provider = "archive"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url=url, **kwargs)
        # As sqlite:///: archive:///relative/dir and archive:////absolute/dir.
        rest = url.partition("://")[2]
        self.directory = Path(rest[1:] if rest.startswith("/") else rest or ".")
        self.ledger = ArchiveLedger(self)
        self.tombstones = None
        self._members: list[Member] = []
        self._threads: dict[str, _Entry] = {}
        self._names: list[str] = []
        self._decoded: OrderedDict[int, dict[str, _Rows]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ArchiveStore {redact_url(self.url)}>"

    def refuse(self, action: str) -> ReadOnlyStoreError:
        return ReadOnlyStoreError(
            f"cannot {action}: the archive {redact_url(self.url)} is read-only; copy its threads "
            "into a store to change them (durability copy archive:///DIR URL)"
        )

    # ------------------------------------------------------------------ the index

    def _setup(self) -> None:
        seq = 0
        for path in archive_files(self.directory):
            start = 0
            for offset, length, threads in read_index(path):
                seq = self._add_member(Member(path, offset, length, seq + 1), threads)
                start = offset + length
            for offset, length, data in scan_members(path, start):
                threads = summarize(parse_member(path, data))
                seq = self._add_member(Member(path, offset, length, seq + 1), threads)
        self._names = sorted(self._threads)

    def _add_member(self, member: Member, threads: dict[str, ThreadSummary]) -> int:
        """Index one member; the seq of its last checkpoint (checkpoints are numbered on)."""
        index = len(self._members)
        self._members.append(member)
        last = member.first_seq - 1
        for thread_id, summary in threads.items():
            entry = self._threads.setdefault(thread_id, _Entry())
            if entry.members and summary.checkpoints:
                entry.exact = False  # archived again: counted once when it is read
            entry.members.append(index)
            entry.checkpoints += summary.checkpoints
            entry.size_bytes += summary.size_bytes
            if summary.checkpoints:
                entry.newest_seq = member.first_seq - 1 + summary.last
            newest = summary.newest_at
            if newest is not None and (entry.newest_at is None or newest > entry.newest_at):
                entry.newest_at = newest
            if summary.ledger is not None:
                entry.ledger = summary.ledger
            last += summary.checkpoints
        return last

    def _read_generation(self) -> int | None:
        return FORMAT_GENERATION  # rows are kept as the codec wrote them

    def _has_any_checkpoint(self) -> bool:
        return any(e.checkpoints for e in self._threads.values())

    # ------------------------------------------------------------------ a thread's rows

    def _rows(self, thread_id: str) -> _Rows:
        """The thread's checkpoints in write order and writes, each kept once."""
        entry = self._threads.get(thread_id)
        found = _Rows()
        if entry is None:
            return found
        seen: set[CheckpointKey] = set()
        written: set[tuple[str, str, str, int]] = set()
        for index in entry.members:
            rows = self._member(index).get(thread_id, _Rows())
            for cp in rows.checkpoints:
                if (cp.namespace, cp.checkpoint_id) not in seen:
                    seen.add((cp.namespace, cp.checkpoint_id))
                    found.checkpoints.append(cp)
            for w in rows.writes:
                key = (w.namespace, w.checkpoint_id, w.task_id, w.idx)
                if key not in written:
                    written.add(key)
                    found.writes.append(w)
        return found

    def _member(self, index: int) -> dict[str, _Rows]:
        with self._lock:
            if index in self._decoded:
                self._decoded.move_to_end(index)
                return self._decoded[index]
        member = self._members[index]
        rows = _by_thread(member.path, read_member(member), member.first_seq - 1)
        with self._lock:
            self._decoded[index] = rows
            while len(self._decoded) > MEMBERS_KEPT:
                self._decoded.popitem(last=False)
        return rows

    def _select(self, query: Select) -> list[EncodedCheckpoint]:
        self.ready()
        rows = [r for r in self._rows(query.thread_id).checkpoints if query.matches(r, r.seq)]
        key, reverse = _ORDER[query.order]
        rows.sort(key=key, reverse=reverse)
        return rows if query.limit is None else rows[: query.limit]

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> Mapping[CheckpointKey, Sequence[EncodedWrite]]:
        self.ready()
        found: dict[CheckpointKey, list[EncodedWrite]] = {key: [] for key in keys}
        for w in self._rows(thread_id).writes:
            if (w.namespace, w.checkpoint_id) in found:
                found[(w.namespace, w.checkpoint_id)].append(w)
        return found

    # ------------------------------------------------------------------ threads

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        self.ready()
        start = 0 if cursor is None else bisect.bisect_right(self._names, cursor)
        chosen = self._names[start : start + limit]
        records = [r for r in (self._thread_record(t) for t in chosen) if r is not None]
        more = start + limit < len(self._names)
        return ThreadPage(records, chosen[-1] if more and chosen else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        self.ready()
        entry = self._threads.get(thread_id)
        if entry is None:
            return None
        if not entry.exact:
            self._recount(entry, thread_id)
        ledger = entry.ledger or ThreadRecord(thread_id=thread_id)
        return replace(
            ledger,
            checkpoints=entry.checkpoints,
            size_bytes=entry.size_bytes,
            newest_at=entry.newest_at,
            newest_seq=entry.newest_seq,
        )

    def _recount(self, entry: _Entry, thread_id: str) -> None:
        rows = self._rows(thread_id).checkpoints
        entry.checkpoints = len(rows)
        entry.size_bytes = sum(r.size_bytes for r in rows)
        entry.newest_at = max((r.created_at for r in rows), default=None)
        entry.newest_seq = rows[-1].seq if rows else None
        entry.exact = True


def _by_thread(path: Path, data: bytes, last_seq: int) -> dict[str, _Rows]:
    """One member's records by thread, its checkpoints numbered on from ``last_seq``."""
    found: dict[str, _Rows] = {}
    seq = last_seq
    for item in parse_member(path, data):
        rows = found.setdefault(item.thread_id, _Rows())
        if isinstance(item, EncodedCheckpoint):
            seq += 1
            rows.checkpoints.append(replace(item, seq=seq))
        elif isinstance(item, EncodedWrite):
            rows.writes.append(item)
        else:
            rows.ledger = item
    return found


class ArchiveLedger(Ledger):
    """The archived ledger records (in each thread's record), read-only."""

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

    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        raise self.store.refuse("renew a lease")

    def _release(self, thread_id: str, holder: str) -> None:
        raise self.store.refuse("release a lease")
