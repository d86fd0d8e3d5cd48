"""Aggregate reads: the per-group sums and top-N lists a notebook shows of a store of any size.

Each answer's size follows the number of groups (or ``top``), never the number of checkpoints.
These defaults read the header columns in chunks and keep only the sums (Redis, memory and the
foreign stores); the SQL store answers each with one ``GROUP BY`` or ``ORDER BY … LIMIT``
(:mod:`durability.stores.sql.aggregates`). Payloads are never read.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from durability.clock import to_micros
from durability.errors import CapabilityError, InvalidIdError
from durability.stores.capability import Capability
from durability.stores.rows import CheckpointAddress

#: An aggregate's answer: column name -> a list of values, one per group, in the answer's order.
Table = dict[str, list[Any]]

#: The checkpoint header columns :meth:`Aggregates.checkpoint_groups` groups by.
GROUP_COLUMNS = ("runner", "node_id", "status", "step_type")
#: The columns of :meth:`Aggregates.checkpoint_groups` (``key``: the group's value).
GROUP_ANSWER = ("key", "threads", "checkpoints", "size_bytes")
#: The checkpoint header columns :meth:`Aggregates.sample_columns` reads.
SAMPLE_COLUMNS = (
    "thread_id",
    "namespace",
    "run_id",
    "checkpoint_id",
    "seq",
    "node_id",
    "runner",
    "step",
    "step_type",
    "status",
    "created_at",
    "size_bytes",
)
#: The columns of :meth:`Aggregates.owner_groups`.
OWNER_ANSWER = ("owner", "threads", "checkpoints", "size_bytes", "finished")
#: The columns of :meth:`Aggregates.top_checkpoints` (``created_at`` in microseconds).
TOP_CHECKPOINT_ANSWER = (
    "thread_id",
    "namespace",
    "checkpoint_id",
    "node_id",
    "runner",
    "created_at",
    "size_bytes",
)
#: The columns of :meth:`Aggregates.top_threads` (``newest_at`` in microseconds).
TOP_THREAD_ANSWER = ("thread_id", "owner", "checkpoints", "size_bytes", "newest_at")
#: What :meth:`Aggregates.top_threads` ranks by.
THREAD_RANKS = ("size_bytes", "newest_at")
#: The columns of :meth:`Aggregates.missing_rows` (``why``: ``quarantined: <reason>`` or
#: ``pending: …``, the first missing row's).
MISSING_ANSWER = (
    "thread_id",
    "owner",
    "checkpoints",
    "restorable_checkpoints",
    "up_to_seq",
    "up_to_checkpoint",
    "lost_bytes",
    "why",
)
#: Why a row the plane lacks is missing when it is pending.
PENDING_WHY = "pending: not sent to the plane yet"
#: The columns of :meth:`Aggregates.outbox_groups`.
OUTBOX_ANSWER = ("state", "rows", "size_bytes", "attempts")
#: The columns of :meth:`Aggregates.pending_spans`: the grid indexes a group's spans start and
#: end at (``ends`` ``None``: still pending), how many, and their oldest write time (microseconds).
PENDING_ANSWER = ("starts", "ends", "spans", "oldest_created")


class Aggregates(Capability):
    """Per-group sums and top-N lists, computed where the store can (part of ``store.scans``)."""

    def checkpoint_groups(self, by: str) -> Table:
        """Per value of the checkpoint header ``by`` (one of :data:`GROUP_COLUMNS`): threads
        (distinct), checkpoints and bytes (:data:`GROUP_ANSWER`), most bytes first, then by key;
        a checkpoint with no value counts under ``None``."""
        if by not in GROUP_COLUMNS:
            raise InvalidIdError(
                f"cannot group checkpoints by {by!r}: use one of {', '.join(GROUP_COLUMNS)}"
            )
        self.store.ready()
        return _largest_first(self._checkpoint_groups(by), GROUP_ANSWER)

    def owner_groups(self) -> Table:
        """Per owner of the ledger: threads, their checkpoints and bytes, and how many finished
        (:data:`OWNER_ANSWER`), most bytes first; a thread no run recorded counts under ``None``."""
        self.store.ready()
        return _largest_first(self._owner_groups(), OWNER_ANSWER)

    def top_checkpoints(self, top: int) -> Table:
        """The ``top`` largest checkpoints (:data:`TOP_CHECKPOINT_ANSWER`), largest first."""
        _check_top(top, "list the largest checkpoints")
        self.store.ready()
        return self._top_checkpoints(top)

    def top_threads(self, top: int, by: str = "size_bytes") -> Table:
        """The ``top`` threads with the most bytes (``by="size_bytes"``) or the newest
        checkpoints (``by="newest_at"``) (:data:`TOP_THREAD_ANSWER`), in that order."""
        _check_top(top, "list the top threads")
        if by not in THREAD_RANKS:
            raise InvalidIdError(
                f"cannot rank threads by {by!r}: use one of {', '.join(THREAD_RANKS)}"
            )
        self.store.ready()
        return self._top_threads(top, by)

    def totals(self) -> tuple[int, int]:
        """The store's checkpoints and their bytes, counted in the store."""
        self.store.ready()
        return self._store_totals()

    def sample_checkpoints(self, sample: int, seed: int = 0) -> list[CheckpointAddress]:
        """About ``sample`` checkpoints picked at random (``seed`` fixes the pick), as
        ``(thread_id, namespace, checkpoint_id)``, in no particular order: what an analysis
        that must decode payloads reads instead of every checkpoint."""
        _check_top(sample, "sample checkpoints")
        self.store.ready()
        return self._sample_checkpoints(sample, random.Random(seed))

    def sample_columns(self, sample: int, seed: int = 0, *, columns: Sequence[str]) -> Table:
        """The header ``columns`` (of :data:`SAMPLE_COLUMNS`) of about ``sample`` checkpoints
        picked at random as :meth:`sample_checkpoints` picks them, in no particular order: what
        an estimate of a grouping no index serves reads instead of every checkpoint."""
        _check_top(sample, "sample checkpoints")
        if unknown := [c for c in columns if c not in SAMPLE_COLUMNS]:
            raise InvalidIdError(
                f"cannot sample checkpoint columns {unknown!r}: use some of {', '.join(SAMPLE_COLUMNS)}"
            )
        self.store.ready()
        return self._sample_columns(sample, random.Random(seed), tuple(columns))

    def live_leases(self, thread_ids: Sequence[str], now: datetime) -> list[str]:
        """Which of these threads hold a lease still live at ``now``, in the order given: one
        read of their ledger records on SQL, a record per thread elsewhere."""
        self.store.ready()
        return self._live_leases(list(thread_ids), now)

    def _live_leases(self, thread_ids: list[str], now: datetime) -> list[str]:
        live = []
        for thread_id in thread_ids:
            record = self.store.thread(thread_id)
            if record is not None and record.lease is not None and record.lease.live(now):
                live.append(thread_id)
        return live

    def missing_rows(self) -> Table:
        """Per thread with a row the plane lacks (pending or quarantined): its checkpoints,
        those before the first missing one (``restorable_checkpoints``, the last of them
        ``up_to_seq`` / ``up_to_checkpoint``), the bytes from it on and why it is missing
        (:data:`MISSING_ANSWER`), in thread id order. Its size follows the outbox, not the
        store; empty for a store that keeps no outbox."""
        self.store.ready()
        if self.store.outbox is None:
            return {name: [] for name in MISSING_ANSWER}
        return self._missing_rows()

    def outbox_groups(self, totals: tuple[int, int] | None = None) -> Table:
        """Per outbox state (pending, synced, quarantined): rows, bytes and delivery attempts
        (:data:`OUTBOX_ANSWER`), in that order of states; states with no row are left out.
        ``totals``: the store's checkpoints and bytes when already counted (the sums of
        :meth:`owner_groups`), which a SQL store then does not count again.

        Raises :class:`~durability.errors.CapabilityError` when the store keeps no outbox.
        """
        if self.store.outbox is None:
            raise self.store.missing("outbox", "count the outbox by state")
        self.store.ready()
        return self._outbox_groups(totals)

    def pending_spans(self, step: int, origin: int = 0) -> Table:
        """Every time a row was pending that covers an instant of a time grid, grouped by the
        instants it covers: what a backlog chart needs of an outbox of any size
        (:data:`PENDING_ANSWER`).

        A span runs from the row's write (or its release, ``pending_since``) until the plane
        took or refused it; a released row's time pending before its quarantine comes from
        :meth:`~durability.stores.outbox.Outbox.history`. The grid's instants are ``origin +
        k * step`` (microseconds); a span counts under ``starts``, the first ``k`` whose
        instant is at or after its start, and ``ends``, the first at or after its end, so it
        covers the instants ``starts`` to ``ends - 1``; a span covering none is left out, as
        is a row synced with no recorded time (when it stopped is unknown). The answer's size
        follows the distinct ``(starts, ends)`` pairs — at most the square of the instants the
        outbox spans — never the number of rows: SQL answers with one ``GROUP BY`` of the
        crossing spans, the default reads the outbox in chunks.

        Raises :class:`~durability.errors.CapabilityError` when the store keeps no outbox.
        """
        if step < 1:
            raise InvalidIdError(f"cannot group the pending spans: step={step} must be positive")
        self._check_outbox("group the pending spans")
        groups = self._pending_spans(step, origin)
        for past in self.store.outbox.history():  # type: ignore[union-attr]
            start, end = to_micros(past.pending_from), to_micros(past.pending_until)
            key = (_grid_index(start, step, origin), _grid_index(end, step, origin))
            if key[1] > key[0]:
                _add_span(groups, key, 1, to_micros(past.created_at))
        keys = sorted(groups, key=lambda k: (k[0], k[1] is None, k[1] or 0))
        return {
            "starts": [k[0] for k in keys],
            "ends": [k[1] for k in keys],
            "spans": [groups[k][0] for k in keys],
            "oldest_created": [groups[k][1] for k in keys],
        }

    def oldest_write(self) -> int | None:
        """The oldest checkpoint's write time, or the start of the oldest time a released row
        was pending (:meth:`~durability.stores.outbox.Outbox.history`) if older (microseconds);
        ``None`` for a store holding neither: where a backlog chart starts by default."""
        self.store.ready()
        found = self._oldest_write()
        past = (
            [to_micros(p.pending_from) for p in self.store.outbox.history()]
            if self.store.outbox is not None
            else []
        )
        return min([*past, *([] if found is None else [found])], default=None)

    def _check_outbox(self, action: str) -> None:
        if self.store.outbox is None:
            raise self.store.missing("outbox", action)
        self.store.ready()

    # ------------------------------------------------------------------ defaults: in chunks

    def _checkpoint_groups(self, by: str) -> dict[Any, list[Any]]:
        sums: dict[Any, list[Any]] = {}
        seen: set[tuple[Any, str]] = set()
        for chunk in self.store.checkpoint_columns(columns=("thread_id", by, "size_bytes")):
            for thread_id, key, size in _rows(chunk, ("thread_id", by, "size_bytes")):
                entry = sums.setdefault(key, [0, 0, 0])
                if (key, thread_id) not in seen:
                    seen.add((key, thread_id))
                    entry[0] += 1
                entry[1] += 1
                entry[2] += int(size or 0)
        return sums

    def _owner_groups(self) -> dict[Any, list[Any]]:
        sums: dict[Any, list[Any]] = {}
        names = ("owner", "checkpoints", "size_bytes", "finished_at")
        for chunk in self.store.thread_columns():
            for owner, count, size, finished in _rows(chunk, names):
                entry = sums.setdefault(owner, [0, 0, 0, 0])
                entry[0] += 1
                entry[1] += int(count or 0)
                entry[2] += int(size or 0)
                entry[3] += finished is not None
        return sums

    def _top_checkpoints(self, top: int) -> Table:
        rows = (
            row
            for chunk in self.store.checkpoint_columns(columns=TOP_CHECKPOINT_ANSWER)
            for row in _rows(chunk, TOP_CHECKPOINT_ANSWER)
        )
        return _top(rows, top, TOP_CHECKPOINT_ANSWER, rank=-1, ident=2)

    def _top_threads(self, top: int, by: str) -> Table:
        rows = (
            row
            for chunk in self.store.thread_columns()
            if len(chunk["thread_id"])
            for row in _rows(chunk, TOP_THREAD_ANSWER)
        )
        return _top(rows, top, TOP_THREAD_ANSWER, rank=TOP_THREAD_ANSWER.index(by), ident=0)

    def _store_totals(self) -> tuple[int, int]:
        count = size = 0
        for chunk in self.store.checkpoint_columns(columns=("size_bytes",)):
            count += len(chunk["size_bytes"])
            size += sum(int(s or 0) for s in chunk["size_bytes"])
        return count, size

    def _sample_checkpoints(self, sample: int, rng: random.Random) -> list[CheckpointAddress]:
        found = self._sample_columns(sample, rng, ("thread_id", "namespace", "checkpoint_id"))
        return [(t, n or "", c) for t, n, c in _rows(found, tuple(found))]

    def _sample_columns(self, sample: int, rng: random.Random, columns: tuple[str, ...]) -> Table:
        # A uniform reservoir sample over every checkpoint, read in chunks of those columns.
        chosen: list[tuple[Any, ...]] = []
        seen = 0
        for chunk in self.store.checkpoint_columns(columns=columns):
            for row in _rows(chunk, columns):
                seen += 1
                if len(chosen) < sample:
                    chosen.append(row)
                elif (slot := rng.randrange(seen)) < sample:
                    chosen[slot] = row
        return {name: [row[i] for row in chosen] for i, name in enumerate(columns)}

    def _missing_rows(self) -> Table:
        first: dict[str, tuple[int, str]] = {}
        names = ("thread_id", "seq", "synced", "sync_error")
        for chunk in self.store.checkpoint_columns(columns=names):
            for thread_id, seq, synced, error in _rows(chunk, names):
                if synced and not error:
                    continue
                why = f"quarantined: {error}" if error else PENDING_WHY
                if (seq, why) < first.get(thread_id, (seq + 1, "")):
                    first[thread_id] = (seq, why)
        counts: dict[str, list[Any]] = {t: [0, 0, None, None, 0] for t in first}
        names = ("thread_id", "seq", "checkpoint_id", "size_bytes")
        for chunk in self.store.checkpoint_columns(columns=names):
            for thread_id, seq, checkpoint_id, size in _rows(chunk, names):
                if (entry := counts.get(thread_id)) is None:
                    continue
                entry[0] += 1
                if seq < first[thread_id][0]:
                    entry[1] += 1
                    if entry[2] is None or seq > entry[2]:
                        entry[2], entry[3] = seq, checkpoint_id
                else:
                    entry[4] += int(size or 0)
        owners = self._owners(set(first))
        ordered = sorted(counts)
        return {
            "thread_id": ordered,
            "owner": [owners.get(t) for t in ordered],
            **{name: [counts[t][i] for t in ordered] for i, name in enumerate(MISSING_ANSWER[2:7])},
            "why": [first[t][1] for t in ordered],
        }

    def _spans(self) -> Iterator[tuple[int, int | None, int]]:
        """Each row's span: start, end (``None``: still pending) and write time."""
        names = ("created_at", "pending_since", "synced_at", "synced")
        try:
            chunks = self.store.outbox_columns()
        except CapabilityError:  # a store whose outbox cannot be listed row by row
            return
        for chunk in chunks:
            for created, since, left, synced in _rows(chunk, names):
                if not (synced and left is None):
                    start = int(created if since is None else since)
                    yield start, None if left is None else int(left), int(created)

    def _pending_spans(self, step: int, origin: int) -> dict[tuple[int, int | None], list[int]]:
        groups: dict[tuple[int, int | None], list[int]] = {}
        for start, end, created in self._spans():
            first = _grid_index(start, step, origin)
            stop = None if end is None else _grid_index(end, step, origin)
            if stop is None or stop > first:
                _add_span(groups, (first, stop), 1, created)
        return groups

    def _oldest_write(self) -> int | None:
        return min(
            (
                int(at)
                for chunk in self.store.checkpoint_columns(columns=("created_at",))
                for at in chunk["created_at"]
            ),
            default=None,
        )

    def _owners(self, thread_ids: set[str]) -> dict[str, Any]:
        return {
            thread_id: owner
            for chunk in self.store.thread_columns()
            for thread_id, owner in _rows(chunk, ("thread_id", "owner"))
            if thread_id in thread_ids
        }

    def _outbox_groups(self, totals: tuple[int, int] | None) -> Table:
        sums: dict[str, list[int]] = {}
        names = ("synced", "sync_error", "size_bytes", "attempts")
        try:
            chunks = list(self.store.outbox_columns())
        except CapabilityError:  # a store whose outbox cannot be listed row by row
            chunks = []
        for chunk in chunks:
            for synced, error, size, attempts in _rows(chunk, names):
                state = "pending" if not synced else ("quarantined" if error else "synced")
                entry = sums.setdefault(state, [0, 0, 0])
                entry[0] += 1
                entry[1] += int(size or 0)
                entry[2] += int(attempts or 0)
        return outbox_table(sums)


def outbox_table(sums: dict[str, list[int]]) -> Table:
    """Per-state sums (state -> rows, bytes, attempts) as :data:`OUTBOX_ANSWER`, in state order."""
    states = [s for s in ("pending", "synced", "quarantined") if s in sums]
    return {
        "state": states,
        "rows": [sums[s][0] for s in states],
        "size_bytes": [sums[s][1] for s in states],
        "attempts": [sums[s][2] for s in states],
    }


def _grid_index(at: int, step: int, origin: int) -> int:
    """The first ``k`` with ``origin + k * step >= at`` (a ceiling division)."""
    return -((origin - at) // step)


def _add_span(
    groups: dict[tuple[int, int | None], list[int]],
    key: tuple[int, int | None],
    spans: int,
    created: int,
) -> None:
    entry = groups.get(key)
    if entry is None:
        groups[key] = [spans, created]
    else:
        entry[0] += spans
        entry[1] = min(entry[1], created)


def _rows(chunk: dict[str, Any], names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    return zip(*(chunk[n] for n in names), strict=True)


def _check_top(top: int, action: str) -> None:
    if top < 1:
        raise InvalidIdError(f"cannot {action}: top={top} must be at least 1")


def _largest_first(sums: dict[Any, list[Any]], names: Sequence[str]) -> Table:
    """Group sums (key -> the other columns' values) as a table, most bytes first, then by key
    (``None`` last); ``size_bytes`` is the third value of each group."""
    ordered = sorted(sums.items(), key=lambda kv: (-int(kv[1][2]), kv[0] is None, str(kv[0])))
    table: Table = {name: [] for name in names}
    for key, values in ordered:
        for name, value in zip(names, (key, *values), strict=True):
            table[name].append(value)
    return table


def _top(
    rows: Iterable[tuple[Any, ...]], top: int, names: Sequence[str], *, rank: int, ident: int
) -> Table:
    """The ``top`` rows largest by ``row[rank]`` (ties by ``row[ident]``), largest first: a
    heap of ``top`` rows, whatever the number read."""
    best = heapq.nlargest(
        top, rows, key=lambda row: (int(row[rank] or 0), _Reversed(str(row[ident])))
    )
    return {name: [row[i] for row in best] for i, name in enumerate(names)}


class _Reversed:
    """A string that sorts backwards: ``nlargest`` then breaks ties by the smaller id."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __lt__(self, other: _Reversed) -> bool:
        return self.text > other.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.text == other.text

    __hash__ = None  # type: ignore[assignment]
