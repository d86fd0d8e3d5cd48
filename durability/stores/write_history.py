"""Write-history aggregates: what a retention forecast and backtest read of a store of any size.

Both answer on a grid of instants ``origin + k * step`` (microseconds since the epoch), and
their size follows the grid (and, for :meth:`WriteHistory.thread_buckets`, the threads that
wrote in it), never the number of checkpoints. These defaults read the header columns in
chunks and keep only the sums (Redis, memory and the foreign stores); the SQL store answers
each with one ``GROUP BY`` (:mod:`durability.stores.sql.write_history`). Payloads are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durability.errors import InvalidIdError
from durability.stores.capability import Capability

#: An answer: column name -> a list of values, one per group, in the answer's order.
Table = dict[str, list[Any]]

#: The columns of :meth:`WriteHistory.written_per_bucket`.
WRITTEN_ANSWER = ("bucket", "checkpoints", "size_bytes")
#: The columns of :meth:`WriteHistory.thread_buckets` (times and spans in microseconds).
THREAD_BUCKET_ANSWER = (
    "thread_id",
    "bucket",
    "size_bytes",
    "newest_at",
    "oldest_at",
    "finished_at",
    "declared_waiting",
    "declared_finished",
    "owner",
)
#: The ledger columns :meth:`WriteHistory.thread_buckets` repeats on each of a thread's rows.
LEDGER_COLUMNS = ("finished_at", "declared_waiting", "declared_finished", "owner")


class WriteHistory(Capability):
    """Checkpoints and bytes written per time bucket, in all and per thread (``store.scans``)."""

    def written_per_bucket(self, origin: int, step: int, buckets: int) -> Table:
        """Checkpoints and bytes written in each bucket ``k`` (``0 <= k < buckets``) of the
        grid: written at or after ``origin + k * step`` and before ``origin + (k + 1) * step``
        (:data:`WRITTEN_ANSWER`), one entry per bucket written in, in bucket order."""
        _check_grid(step, buckets, "count the writes per bucket")
        self.store.ready()
        return self._written_per_bucket(origin, step, buckets)

    def thread_buckets(self, origin: int, step: int, buckets: int) -> Table:
        """Per thread and bucket it wrote in: bytes, newest and oldest write time, and the
        thread's finished mark, declared retention and owner (:data:`THREAD_BUCKET_ANSWER`), in
        thread id then bucket order.

        The grid has ``buckets`` instants (``k`` from 0). Bucket ``0`` holds every write at
        or before ``origin``; bucket ``k`` (``1 <= k < buckets``) the writes after instant
        ``k - 1`` and at or before instant ``k``; bucket ``buckets`` the writes after the last
        instant: where a sweep at each instant finds them (``numpy.searchsorted(instants, t,
        "left")``). A thread with no checkpoint has no row.
        """
        _check_grid(step, buckets, "group the writes per thread and bucket")
        self.store.ready()
        return self._thread_buckets(origin, step, buckets)

    # ------------------------------------------------------------------ defaults: in chunks

    def _written_per_bucket(self, origin: int, step: int, buckets: int) -> Table:
        sums: dict[int, list[int]] = {}
        for chunk in self.store.checkpoint_columns(columns=("created_at", "size_bytes")):
            for at, size in zip(chunk["created_at"], chunk["size_bytes"], strict=True):
                if at is None or not origin <= at < origin + step * buckets:
                    continue
                entry = sums.setdefault((int(at) - origin) // step, [0, 0])
                entry[0] += 1
                entry[1] += int(size or 0)
        keys = sorted(sums)
        return {
            "bucket": keys,
            "checkpoints": [sums[k][0] for k in keys],
            "size_bytes": [sums[k][1] for k in keys],
        }

    def _thread_buckets(self, origin: int, step: int, buckets: int) -> Table:
        groups: dict[tuple[str, int], list[int]] = {}
        names = ("thread_id", "created_at", "size_bytes")
        for chunk in self.store.checkpoint_columns(columns=names):
            for thread_id, at, size in zip(*(chunk[n] for n in names), strict=True):
                if at is None:
                    continue
                key = (thread_id, bucket_of(int(at), origin, step, buckets))
                entry = groups.get(key)
                if entry is None:
                    groups[key] = [int(size or 0), int(at), int(at)]
                else:
                    entry[0] += int(size or 0)
                    entry[1] = max(entry[1], int(at))
                    entry[2] = min(entry[2], int(at))
        ledger = self._ledger_marks({t for t, _ in groups})
        keys = sorted(groups)
        table: Table = {"thread_id": [k[0] for k in keys], "bucket": [k[1] for k in keys]}
        for i, name in enumerate(("size_bytes", "newest_at", "oldest_at")):
            table[name] = [groups[k][i] for k in keys]
        for i, name in enumerate(LEDGER_COLUMNS):
            table[name] = [ledger.get(k[0], (None,) * len(LEDGER_COLUMNS))[i] for k in keys]
        return table

    def _ledger_marks(self, thread_ids: set[str]) -> dict[str, tuple[Any, ...]]:
        """The ledger columns of these threads (from the thread columns)."""
        return {
            row[0]: row[1:]
            for chunk in self.store.thread_columns()
            for row in zip(*(chunk[n] for n in ("thread_id", *LEDGER_COLUMNS)), strict=True)
            if row[0] in thread_ids
        }


def bucket_of(at: int, origin: int, step: int, buckets: int) -> int:
    """Which bucket of :meth:`WriteHistory.thread_buckets` a write at ``at`` falls in."""
    if at <= origin:
        return 0
    return min(buckets, -(-(at - origin) // step))


def _check_grid(step: int, buckets: int, action: str) -> None:
    if step < 1 or buckets < 1:
        raise InvalidIdError(
            f"cannot {action}: step={step} and buckets={buckets} must both be at least 1"
        )


def columns(rows: Sequence[Sequence[Any]], names: Sequence[str]) -> Table:
    """Rows (tuples in ``names`` order) as a :data:`Table` (transposed in C by ``zip``)."""
    transposed = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return {name: list(values) for name, values in zip(names, transposed, strict=True)}
