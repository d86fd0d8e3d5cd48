"""The scans capability: the analysis and sweep reads, and the sweep's batched delete.

Every store has one (``store.scans``). The defaults here are built on the core contract and
read a thread at a time; the SQL and Redis stores override them to aggregate in the backend
(a ``GROUP BY``, pipelines), so a store of millions of checkpoints is never held as objects.
Column reads come in chunks of numpy object arrays (numpy is imported here, never by
``import durability``); payloads are never decoded.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from durability import codec
from durability.clock import to_micros
from durability.errors import InvalidIdError
from durability.model import Deleted, ThreadRecord
from durability.stores.aggregates import Aggregates
from durability.stores.ids import check_id, check_ids, check_thread
from durability.stores.outbox import EntryQuery, RowKey
from durability.stores.rows import CheckpointAddress, CheckpointRow, EncodedCheckpoint, Select
from durability.stores.sweep_lock import MemorySweepLock, SweepLock
from durability.stores.write_history import WriteHistory

#: A chunk of an analysis read: column name -> that column's values, a numpy object array.
Columns = dict[str, Any]

#: The columns of :meth:`Scans.checkpoint_columns` (times in microseconds since the epoch).
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

#: The columns of :meth:`Scans.thread_columns` (times and durations in microseconds).
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

#: The columns of :meth:`Scans.outbox_columns` (times in microseconds since the epoch).
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
    "pending_since",
)


class Scans(WriteHistory, Aggregates):
    """Whole-store reads for the frames and the sweep, built on the core contract."""

    # ------------------------------------------------------------------ analysis reads

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
            check_thread(thread_id, "", "read checkpoint columns")
        unknown = [c for c in columns if c not in CHECKPOINT_COLUMNS]
        if unknown:
            raise InvalidIdError(
                f"cannot read checkpoint columns: {unknown!r} are not among {list(CHECKPOINT_COLUMNS)}"
            )
        _check_chunk(chunk_size, "read checkpoint columns")
        self.store.ready()
        wanted = tuple(columns)
        return (
            {name: chunk[name] for name in wanted}
            for chunk in self._checkpoint_columns(thread_id, wanted, chunk_size)
        )

    def checkpoint_buckets(self, width: timedelta, *, last: timedelta | None = None) -> Columns:
        """Checkpoints and their bytes per time bucket, counted in the store: ``bucket`` (the
        bucket's start, microseconds since the epoch, a multiple of ``width``), ``checkpoints``
        and ``size_bytes``, one entry per bucket that holds a checkpoint, oldest first.
        ``last``: only the checkpoints written in that long up to the newest one's write time.

        The aggregate a chart of a production-sized store needs instead of its rows: SQL
        answers with one ``GROUP BY``; the default (Redis, memory, foreign stores) reads the
        write times and sizes in chunks and keeps only the per-bucket sums.
        """
        step = int(width.total_seconds() * 1_000_000)
        if step < 1:
            raise InvalidIdError(
                f"cannot count checkpoints per bucket: width={width} must be positive"
            )
        if last is not None and last < timedelta(0):
            raise InvalidIdError(f"cannot count checkpoints per bucket: last={last} is negative")
        self.store.ready()
        return self._checkpoint_buckets(
            step, None if last is None else last // timedelta(microseconds=1)
        )

    def _checkpoint_buckets(self, step: int, last: int | None) -> Columns:
        """Per bucket of ``step`` microseconds (``last``: of the writes in that many up to
        the newest, both in microseconds)."""
        since = None
        if last is not None:
            written = self.checkpoint_columns(columns=("created_at",))
            newest = max((int(at) for chunk in written for at in chunk["created_at"]), default=0)
            since = newest - last
        counts: dict[int, list[int]] = {}
        for chunk in self.checkpoint_columns(columns=("created_at", "size_bytes")):
            for at, size in zip(chunk["created_at"], chunk["size_bytes"], strict=True):
                if since is not None and at < since:
                    continue
                entry = counts.setdefault(int(at) // step * step, [0, 0])
                entry[0] += 1
                entry[1] += int(size)
        keys = sorted(counts)
        return {
            "bucket": keys,
            "checkpoints": [counts[k][0] for k in keys],
            "size_bytes": [counts[k][1] for k in keys],
        }

    def find_threads(
        self, prefix: str = "", *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        """A page of a search: the thread ids starting with ``prefix`` and greater than
        ``after``, in id order (code points), at most ``limit`` of them; never every id.

        Pass the last id of a page as ``after`` for the next. A SQL store answers from an index
        of its ledger (threads a run wrote), or, when its ledger is empty, by reading its
        checkpoints' ids; the default walks the store's thread pages.
        """
        if limit < 1:
            raise InvalidIdError(f"cannot search threads: limit={limit} must be at least 1")
        self.store.ready()
        return self._find_threads(prefix, after, limit)

    def _find_threads(self, prefix: str, after: str | None, limit: int) -> list[str]:
        found = (
            r.thread_id
            for r in self.store.iter_threads()
            if r.thread_id.startswith(prefix) and (after is None or r.thread_id > after)
        )
        return heapq.nsmallest(limit, found)

    def thread_columns(self, *, chunk_size: int = 50_000, lean: bool = False) -> Iterator[Columns]:
        """One row per thread (:data:`THREAD_COLUMNS`): totals, idle gaps, ledger, lease.

        ``max_idle_gap`` is the longest time between two consecutive checkpoints (write
        order) in microseconds, ``None`` for a thread with fewer than two; ``status`` and
        ``newest_run_id`` are those of the thread's last checkpoint. ``lean=True`` may leave
        ``max_idle_gap``, ``status`` and ``newest_run_id`` ``None`` for every thread, where they
        cost reads of their own (the SQL store's ``LAG`` over every checkpoint and its read of
        each thread's newest row); the other columns are the same.
        """
        _check_chunk(chunk_size, "read thread columns")
        self.store.ready()
        if lean:
            return self._lean_thread_columns(chunk_size)
        return self._thread_columns(chunk_size)

    def _lean_thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        """:meth:`_thread_columns` without its costly columns (by default it has them all)."""
        return self._thread_columns(chunk_size)

    def outbox_columns(self, *, chunk_size: int = 50_000) -> Iterator[Columns]:
        """Every outbox entry (:data:`OUTBOX_COLUMNS`), in chunks of columns.

        Raises :class:`~durability.errors.CapabilityError` when the store keeps no outbox.
        """
        _check_chunk(chunk_size, "read outbox columns")
        if self.store.outbox is None:
            raise self.store.missing("outbox", "read outbox columns")
        self.store.ready()
        return self._outbox_columns(chunk_size)

    def run_end_outputs(self, keys: Sequence[CheckpointAddress]) -> dict[CheckpointAddress, Any]:
        """``node_output`` of these ``(thread_id, namespace, checkpoint_id)`` checkpoints, decoded.

        Only that field is decoded (a run end records its status, reason and error there);
        absent checkpoints are left out.
        """
        for thread_id, namespace, checkpoint_id in keys:
            check_thread(thread_id, namespace, "read run ends")
            check_id(checkpoint_id, "checkpoint_id", action="read run ends")
        self.store.ready()
        return self._run_end_outputs(list(dict.fromkeys(keys))) if keys else {}

    def checkpoints_of_runs(self, run_ids: Iterable[str]) -> list[CheckpointAddress]:
        """``(thread_id, namespace, checkpoint_id)`` of every checkpoint whose ``run_id`` is listed.

        An empty run id is refused: it would match every checkpoint written without one.
        """
        wanted = [check_id(r, "run_id", action="find the checkpoints of runs") for r in run_ids]
        self.store.ready()
        return self._checkpoints_of_runs(list(dict.fromkeys(wanted))) if wanted else []

    # ------------------------------------------------------------------ sweep reads

    def sweep_records(self) -> list[ThreadRecord]:
        """Every thread the store knows, with its ledger record and checkpoint totals (any order).

        What the sweep plans from: unlike ``iter_threads`` it reads the store in one go.
        """
        self.store.ready()
        return self._sweep_records()

    def sweep_columns(self) -> SweepColumns:
        """What :meth:`sweep_records` reads, as numpy columns (one row per thread, any order).

        :class:`SweepColumns` builds a row's :class:`ThreadRecord` only when asked (the
        live-thread filters are handed real records), so a plan of 100,000 threads never holds
        100,000 of them.
        """
        self.store.ready()
        return self._sweep_columns()

    def delete_order(self, thread_ids: Sequence[str]) -> list[str]:
        """These threads in the order the sweep should batch them for :meth:`delete_threads`.

        The default keeps the given order; the SQL store sorts by the key its indexes lead
        with, so one batch's entries share index leaves.
        """
        return list(thread_ids)

    def delete_threads(self, thread_ids: Sequence[str]) -> dict[str, Deleted]:
        """Delete several threads as ``delete_thread`` does; what each held, by id.

        A thread the store does not hold removes nothing (``Deleted()``). The SQL store deletes
        in one transaction per call; the default thread by thread.
        """
        ids = list(dict.fromkeys(thread_ids))
        check_ids(ids, "thread_id", action="delete threads")
        self.store.ready()
        return self._delete_threads(ids) if ids else {}

    def still_holding(self, thread_ids: Sequence[str]) -> set[str]:
        """Which of these threads hold a checkpoint or a pending write right now.

        The sweep asks after a delete round, to find the threads a writer raced. The default
        cannot tell cheaply and answers every id, so the sweep deletes them once more and that
        round's delete is the check.
        """
        check_ids(thread_ids, "thread_id", action="check threads are empty")
        self.store.ready()
        return self._still_holding(list(dict.fromkeys(thread_ids))) if thread_ids else set()

    def sweep_notes(self, columns: SweepColumns) -> list[str]:
        """What a sweep plan over ``columns`` should tell its reader about this store (none by
        default; a LangGraph store says when it has no finished marks to go on)."""
        return []

    def sweep_lock(self) -> SweepLock:
        """The lock that keeps one sweep per store at a time (default: a lock in this
        process, which is all a store living in one process needs)."""
        return MemorySweepLock(self.store)

    # ------------------------------------------------------------------ defaults

    def _rows(self, thread_id: str) -> Sequence[CheckpointRow]:
        return self.store._select(Select(thread_id, None))

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        """Chunks holding at least ``columns`` (a provider may return all of them)."""
        states = self._outbox_states(thread_id)
        store = self.store
        names = (
            [thread_id] if thread_id is not None else [r.thread_id for r in store.iter_threads()]
        )

        def rows() -> Iterator[tuple[Any, ...]]:
            for name in names:
                for row in self._rows(name):
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
        outbox = self.store.outbox
        if outbox is None:
            return None
        entries = outbox._entries(EntryQuery(thread_id=thread_id))
        return {(e.thread_id, e.seq): (e.synced, e.sync_error) for e in entries}

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for record in self.store.iter_threads():
                scalars = [row_scalars(r) for r in self._rows(record.thread_id)]
                yield thread_row(record, [(s[4], s[9], s[8], s[2]) for s in scalars])

        return column_chunks(THREAD_COLUMNS, rows(), chunk_size)

    def _outbox_columns(self, chunk_size: int) -> Iterator[Columns]:
        assert self.store.outbox is not None
        entries = self.store.outbox._entries(EntryQuery())
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
                None if e.pending_since is None else to_micros(e.pending_since),
            )
            for e in entries
        )
        return column_chunks(OUTBOX_COLUMNS, rows, chunk_size)

    def _run_end_outputs(self, keys: list[CheckpointAddress]) -> dict[CheckpointAddress, Any]:
        found: dict[CheckpointAddress, Any] = {}
        for key in keys:
            thread_id, namespace, checkpoint_id = key
            rows = self.store._select(Select(thread_id, namespace, checkpoint_id=checkpoint_id))
            for row in rows:
                if isinstance(row, EncodedCheckpoint):
                    found[key] = codec.loads(row.node_output, path="node_output")
                else:
                    found[key] = row.decode().node_output
        return found

    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[CheckpointAddress]:
        wanted = set(run_ids)
        found = []
        for record in self.store.iter_threads():
            for row in self._rows(record.thread_id):
                cp = row.decode()
                if cp.run_id in wanted:
                    found.append((cp.thread_id, cp.namespace, cp.checkpoint_id))
        return found

    def _sweep_records(self) -> list[ThreadRecord]:
        return list(self.store.iter_threads())

    def _sweep_columns(self) -> SweepColumns:
        records = self._sweep_records()
        return SweepColumns.of(
            [r.thread_id for r in records],
            [
                (
                    r.checkpoints,
                    r.size_bytes,
                    micros(r.newest_at),
                    micros(r.started_at),
                    micros(r.finished_at),
                    micros(r.due_at),
                    span(r.declared_waiting),
                    span(r.declared_finished),
                    None if r.lease is None else to_micros(r.lease.expires_at),
                )
                for r in records
            ],
            records.__getitem__,
        )

    def _delete_threads(self, thread_ids: list[str]) -> dict[str, Deleted]:
        return {thread_id: self.store._delete(thread_id, None) for thread_id in thread_ids}

    def _still_holding(self, thread_ids: list[str]) -> set[str]:
        return set(thread_ids)


class SweepColumns:
    """Every thread the sweep plans over, as columns, and each row's record on demand.

    ``thread_id`` is an object array; ``checkpoints`` and ``size_bytes`` int64;
    ``newest_at``, ``started_at``, ``finished_at``, ``due_at`` and ``lease_expires_at``
    datetime64[us] (NaT where the record has none); ``declared_waiting`` and
    ``declared_finished`` timedelta64[us]. :meth:`record` is the row's
    :class:`ThreadRecord`, equal to the one :meth:`Scans.sweep_records` gives.
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

        raw, none = columns_of(cls.VALUES, list(values)), np.iinfo(np.int64).min
        ints = {k: np.where(v == None, none, v).astype(np.int64) for k, v in raw.items()}  # noqa: E711
        return cls.of_ints(thread_ids, ints, record)

    @classmethod
    def of_ints(
        cls,
        thread_ids: Sequence[str],
        values: Mapping[str, Any],
        record: Callable[[int], ThreadRecord],
    ) -> SweepColumns:
        """From ids and int64 columns of :data:`VALUES` (microseconds), int64's minimum where
        a row has no value (no checkpoints and no bytes, or no time)."""
        import numpy as np

        ids = np.empty(len(thread_ids), dtype=object)
        ids[:] = thread_ids
        none = np.iinfo(np.int64).min
        columns: dict[str, Any] = {"thread_id": ids}
        for name in cls.VALUES:
            column = values[name]
            if name in ("checkpoints", "size_bytes"):
                columns[name] = np.where(column == none, 0, column)
                continue
            unit = "timedelta64[us]" if name.startswith("declared") else "datetime64[us]"
            columns[name] = column.view(unit)  # int64's minimum is NaT
        return cls(columns, record)


# ---------------------------------------------------------------------------- column helpers


def _check_chunk(chunk_size: int, action: str) -> None:
    if chunk_size < 1:
        raise InvalidIdError(f"cannot {action}: chunk_size={chunk_size} must be at least 1")


def columns_of(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> Columns:
    """Rows (tuples in ``names`` order) turned into columns: one numpy object array each.

    One 2-D object array is built in C and sliced, which is several times faster than
    transposing the tuples in Python.
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


def micros(value: datetime | None) -> int | None:
    """A time as microseconds since the epoch (``None`` stays ``None``)."""
    return None if value is None else to_micros(value)


def span(value: timedelta | None) -> int | None:
    """A duration in microseconds (``None`` stays ``None``)."""
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
    newest_at = (
        micros(record.newest_at) if record.newest_at is not None else max(known, default=None)
    )
    return (
        record.thread_id,
        record.checkpoints,
        record.size_bytes,
        min(known) if known else None,
        newest_at,
        idle_gap(created),
        newest[2] if newest else None,
        newest[3] if newest else None,
        record.owner,
        record.run_id,
        micros(record.started_at),
        micros(record.finished_at),
        micros(record.due_at),
        span(record.declared_waiting),
        span(record.declared_finished),
        lease.holder if lease else None,
        micros(lease.expires_at) if lease else None,
    )
