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
        """The checkpoints table as a walk of the per-thread index (SQLite would rather scan
        the table and sort; the covering index is the faster walk)."""
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
        last = origin + step * (buckets - 1)

        def bucket(column: str) -> str:
            """The bucket of a time: 0 at or before origin, else ceil((t - origin) / step),
            at most buckets (the six parameters of ``grid``)."""
            return (
                f"CASE WHEN {column} <= {m} THEN 0 WHEN {column} > {m} THEN {m} "
                f"ELSE ({column} - {m} + {m} - 1) / {m} END"
            )

        grid = (origin, last, buckets, origin, step, step)
        # Sorted in the store, in code point order as Python sorts (SQLite's binary order,
        # Postgres's "C" collation): a sort of 1,000,000 tuples in Python took longer.
        code_points = "" if self.store.db.sqlite else ' COLLATE "C"'
        # A bucket grows with the time, so a thread whose oldest and newest writes share one
        # (most threads) is its totals, one GROUP BY on the index walk with no sort; only the
        # threads spanning several are grouped per bucket, read by their key. A thread's newest
        # row is read only for its id when the ledger lacks it (a scalar subquery COALESCE
        # skips; a LEFT JOIN on that condition read every thread's: 1,000,000 random reads).
        query = f"""
WITH t AS (
  SELECT tkey, CAST(SUM(size_bytes) AS BIGINT) AS size, MAX(created_at) AS newest,
         MIN(created_at) AS oldest, MAX(seq) AS newest_seq
  FROM {self._history_index()} WHERE created_at IS NOT NULL GROUP BY tkey
), g AS (
  SELECT tkey, {bucket("oldest")} AS b, size, newest, oldest, newest_seq FROM t
  WHERE {bucket("oldest")} = {bucket("newest")}
  UNION ALL
  SELECT tkey, {bucket("created_at")} AS b, CAST(SUM(size_bytes) AS BIGINT), MAX(created_at),
         MIN(created_at), MAX(seq)
  FROM {self._history_index()}
  WHERE created_at IS NOT NULL
    AND tkey IN (SELECT tkey FROM t WHERE {bucket("oldest")} < {bucket("newest")})
  GROUP BY tkey, b
)
SELECT * FROM (
  SELECT COALESCE(l.thread_id, (SELECT c.thread_id FROM {table} c WHERE c.seq = g.newest_seq))
           AS thread_id,
         g.b, g.size, g.newest, g.oldest,
         l.finished_at, l.declared_waiting, l.declared_finished, l.owner
  FROM g
  LEFT JOIN {ledger} l ON l.tkey = g.tkey
) AS answer
ORDER BY answer.thread_id{code_points}, answer.b"""  # noqa: S608 - identifiers only
        params = grid * 6  # six buckets computed, in the order the statement reads them
        rows = self._history_rows("group the writes per thread and bucket", query, params)
        answer = columns(rows, THREAD_BUCKET_ANSWER)
        answer["size_bytes"] = [int(v or 0) for v in answer["size_bytes"]]
        answer["bucket"] = [int(v) for v in answer["bucket"]]
        return answer
