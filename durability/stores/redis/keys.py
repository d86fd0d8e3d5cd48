"""The Redis store's key layout, and the entries of its cross-slot indexes.

``P`` is the prefix (``durability:`` by default, option ``prefix=``); ``T`` is the thread's
tag, the first 32 hex digits of the SHA-256 of its id (a raw id may hold ``{`` or ``}``, which
would break the hash tag). Every key of a thread is ``P{T}:…``, so all of them sit in one
cluster slot:

=============  =====================================================================
``P{T}:m``     hash: the thread id, the ``seq`` counter, totals, and its ledger record
``P{T}:c``     hash: ``seq`` → checkpoint document (the thread's checkpoints, one hash)
``P{T}:i``     hash: ``namespace \\0 checkpoint id`` → ``seq`` (uniqueness, ``get``)
``P{T}:s``     sorted set by ``seq`` (history in write order; the delete's work list)
``P{T}:x``     sorted set by name, ``namespace \\0 seq``: per-namespace latest and history
``P{T}:ix``    sorted set by name, ``namespace \\0 checkpoint id``: LangGraph's order
``P{T}:w``     hash: pending writes; ``P{T}:wx`` their write order per checkpoint
``P{T}:p``     hash: the pending park (and who claimed it)
``P{T}:sy``    hash: outbox state of rows the plane has
``P{T}:od``    hash: ``seq`` → document of every row the plane does not have yet
``P{T}:os``    hash: outbox state of those rows (attempts, errors, quarantine)
``P{T}:e``     hash: the thread's tombstone once erased (keyed hash, time, who; never expires)
=============  =====================================================================

Keys that cannot share the thread's slot live under ``P{g}:`` (one slot): ``threads`` (paging),
``finished`` (due time, for the sweep), ``parks`` (deadline), ``outbox`` and ``quarantine``
(write time), ``connections``, ``format`` (the generation), ``tombstones`` (erase time, for
counting and listing them), ``erasure_secret``, ``erase_requests`` and ``history`` (what
released rows spent pending before their quarantine). They are written after the thread's
script, and any of them may miss an entry after a crash between the two steps, or hold one
its thread no longer supports. The thread's keys are the truth; the indexes are repaired (see
:mod:`durability.stores.redis.reconcile`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from durability.stores.redis.documents import header_time

DEFAULT_PREFIX = "durability:"
PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")


def thread_tag(thread_id: str) -> str:
    """The hash tag of a thread's keys: 32 hex digits of the SHA-256 of its id."""
    return hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class GlobalKeys:
    """The store-wide keys, all in the ``{g}`` slot."""

    threads: str
    finished: str
    parks: str
    outbox: str
    quarantine: str
    connections: str
    format: str
    reconcile: str
    #: Per project, its drain's heartbeat and last acknowledged batch (written apart from the
    #: connection record, which a disconnect rewrites).
    drains: str
    #: The sweep lock (one sweep per store).
    sweep_lock: str
    #: Tombstoned threads' tags by erase time (the tombstones themselves are in their slots).
    tombstones: str
    #: The store's erasure secret (kept through a reset).
    erasure_secret: str
    #: Erasures the plane has not confirmed yet: "tombstone NUL project" -> request.
    erase_requests: str
    #: A list: the spans released rows spent pending before their quarantine (JSON, anonymous).
    history: str

    @classmethod
    def of(cls, prefix: str) -> GlobalKeys:
        """The keys under ``prefix``."""
        g = f"{prefix}{{g}}:"
        return cls(*(g + name for name in cls.__dataclass_fields__))

    @property
    def indexes(self) -> tuple[str, str, str, str, str]:
        """The five cross-slot indexes, in the order the index script numbers its keys."""
        return (self.threads, self.finished, self.parks, self.outbox, self.quarantine)


class IndexOps:
    """Entries for the cross-slot indexes: member → score, one dict per index."""

    def __init__(self, **entries: dict[str, float]) -> None:
        self.threads: dict[str, float] = entries.get("threads", {})
        self.finished: dict[str, float] = entries.get("finished", {})
        self.parks: dict[str, float] = entries.get("parks", {})
        self.outbox: dict[str, float] = entries.get("outbox", {})
        self.quarantine: dict[str, float] = entries.get("quarantine", {})

    @property
    def empty(self) -> bool:
        """Whether there is nothing to add or remove."""
        return not any(self.indexes())

    def indexes(self) -> tuple[dict[str, float], ...]:
        """The five dicts, in the order the index script numbers its keys."""
        return (self.threads, self.finished, self.parks, self.outbox, self.quarantine)

    def members(self) -> Iterator[str]:
        """Every member of every index, in turn."""
        for entries in self.indexes():
            yield from entries


class ThreadIndex:
    """What a thread's own keys say its index entries should be."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.exists = False
        self.due: int | None = None
        self.park_deadline: int | None = None
        self.pending: list[tuple[int, int, bool]] = []  # seq, write time, quarantined

    @classmethod
    def parse(cls, tag: str, raw: list[Any]) -> ThreadIndex:
        """From the ``index_state`` script's answer."""
        state = cls(tag)
        exists, finished_at, due, deadline, claimed, pending = raw
        state.exists = bool(exists)
        if finished_at is not None and due is not None:
            state.due = int(due)
        if deadline is not None and claimed is None:
            state.park_deadline = int(deadline)
        for j in range(0, len(pending), 3):
            state.pending.append(
                (int(pending[j]), header_time(pending[j + 1]), bool(pending[j + 2]))
            )
        return state

    def entries(self, ops: IndexOps) -> None:
        """Add the entries the thread supports to ``ops``."""
        if self.exists:
            ops.threads[self.tag] = 0
            if self.due is not None:
                ops.finished[self.tag] = self.due
            if self.park_deadline is not None:
                ops.parks[self.tag] = self.park_deadline
        for seq, written, quarantined in self.pending:
            (ops.quarantine if quarantined else ops.outbox)[member(self.tag, seq)] = written


def member(tag: str, seq: int) -> str:
    """An outbox index member: the thread's tag and the row's seq."""
    return f"{tag}:{seq:020d}"


def member_tag(name: bytes | str) -> str:
    """The thread tag of an index member."""
    text = name.decode() if isinstance(name, bytes) else name
    return text.partition(":")[0]


def member_seq(name: str) -> int:
    """The row seq of an outbox index member."""
    return int(name.partition(":")[2])
