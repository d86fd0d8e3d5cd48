"""The SQL store's write-history aggregates: one ``GROUP BY`` each over the per-thread index.

Every column they read is in the ``(tkey, seq, created_at, size_bytes)`` index, so the
statement walks that index (SQLite is told to), never the table of payloads; the per-thread
answer joins the ledger for the finished mark, and names a thread the ledger lacks by its
newest row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durability.stores.sql.engine import reconnecting
from durability.stores.sql.schema import SWEEP_INDEX, threads
from durability.stores.write_history import (
    THREAD_BUCKET_ANSWER,
    WRITTEN_ANSWER,
    Table,
    WriteHistory,
    columns,
)

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore


class SQLWriteHistory(WriteHistory):
    """Write-history aggregates answered by the database."""

    store: SQLStore

    def _history_rows(self, action: str, query: str, params: tuple[Any, ...]) -> list[Any]:
        found: list[Any] = []
        for chunk in self.store.db.stream(action, query, params, 50_000):
            found += chunk
        return found

    def _history_index(self) -> str:
        index = f" INDEXED BY {SWEEP_INDEX.name}" if self.store.db.sqlite else ""
        return f"{self.store.sql.table}{index}"

    @reconnecting
    def _written_per_bucket(self, origin: int, step: int, buckets: int) -> Table:
        m = self.store.db.mark
        query = (
            f"SELECT (created_at - {m}) / {m} AS b, COUNT(*), "  # noqa: S608
            f"CAST(SUM(size_bytes) AS BIGINT) FROM {self._history_index()} "
            f"WHERE created_at >= {m} AND created_at < {m} GROUP BY b ORDER BY b"
        )
        params = (origin, step, origin, origin + step * buckets)
        rows = self._history_rows("count the writes per bucket", query, params)
        answer = columns(rows, WRITTEN_ANSWER)
        answer["size_bytes"] = [int(v or 0) for v in answer["size_bytes"]]
        answer["bucket"] = [int(v) for v in answer["bucket"]]
        return answer

    @reconnecting
    def _thread_buckets(self, origin: int, step: int, buckets: int) -> Table:
        m, table = self.store.db.mark, self.store.sql.table
        ledger = self.store.db.table(threads.name)
        # The bucket: 0 at or before origin, else ceil((t - origin) / step), at most buckets.
        bucket = (
            f"CASE WHEN created_at <= {m} THEN 0 WHEN created_at > {m} THEN {m} "
            f"ELSE (created_at - {m} + {m} - 1) / {m} END"
        )
        last = origin + step * (buckets - 1)
        params = (origin, last, buckets, origin, step, step)
        query = f"""
SELECT COALESCE(l.thread_id, c.thread_id), g.b, g.size, g.newest, g.oldest,
       l.finished_at, l.declared_waiting, l.declared_finished, l.owner
FROM (
  SELECT tkey, {bucket} AS b, CAST(SUM(size_bytes) AS BIGINT) AS size,
         MAX(created_at) AS newest, MIN(created_at) AS oldest, MAX(seq) AS newest_seq
  FROM {self._history_index()} WHERE created_at IS NOT NULL GROUP BY tkey, b
) g
LEFT JOIN {ledger} l ON l.tkey = g.tkey
LEFT JOIN {table} c ON l.tkey IS NULL AND c.seq = g.newest_seq"""  # noqa: S608 - identifiers only
        rows = self._history_rows("group the writes per thread and bucket", query, params)
        rows.sort(key=lambda r: (r[0], r[1]))
        answer = columns(rows, THREAD_BUCKET_ANSWER)
        answer["size_bytes"] = [int(v or 0) for v in answer["size_bytes"]]
        answer["bucket"] = [int(v) for v in answer["bucket"]]
        return answer
