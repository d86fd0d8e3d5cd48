"""The SQL store's aggregates: one ``GROUP BY`` or ``ORDER BY … LIMIT`` statement each.

Per-thread sums walk the ``(tkey, seq, created_at, size_bytes)`` index (no table read); a top
list keeps ``top`` rows of that walk and reads only their checkpoints by primary key.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability._util import chunks
from durability.clock import to_micros
from durability.stores.aggregates import (
    MISSING_ANSWER,
    PENDING_WHY,
    TOP_CHECKPOINT_ANSWER,
    TOP_THREAD_ANSWER,
    Aggregates,
    Table,
    outbox_table,
)
from durability.stores.sql.engine import reconnecting
from durability.stores.sql.outbox import outbox_first, tables_of
from durability.stores.sql.outbox_queue import catch_up, through
from durability.stores.sql.schema import SWEEP_INDEX, thread_key, threads

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore


class SQLAggregates(Aggregates):
    """Aggregates answered by the database."""

    store: SQLStore

    def _answer(self, action: str, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        found: list[Any] = []
        for chunk in self.store.db.stream(action, query, params, 10_000):
            found += chunk
        return found

    def _by_thread(self, alias: str = "") -> str:
        """The checkpoints table (named ``alias``), read through the per-thread totals index
        on SQLite (which would rather scan the table)."""
        index = f" INDEXED BY {SWEEP_INDEX.name}" if self.store.db.sqlite else ""
        return f"{self.store.sql.table}{' ' + alias if alias else ''}{index}"

    @reconnecting
    def _checkpoint_groups(self, by: str) -> dict[Any, list[Any]]:
        # ``by`` is one of GROUP_COLUMNS (checked by the caller): a column name, not a value.
        query = (
            f"SELECT c.{by}, COUNT(DISTINCT c.tkey), COUNT(*), "  # noqa: S608
            f"CAST(SUM(c.size_bytes) AS BIGINT) FROM {self.store.sql.table} c GROUP BY c.{by}"
        )
        rows = self._answer("group checkpoints", query)
        return {r[0]: [int(r[1]), int(r[2]), int(r[3] or 0)] for r in rows}

    @reconnecting
    def _owner_groups(self) -> dict[Any, list[Any]]:
        # The threads holding checkpoints by ledger owner (the per-thread index walked once,
        # counting those the ledger records), then the whole ledger by owner: a ledger thread
        # holding no checkpoint is one not matched above, found with no probe per thread (1M
        # random probes of the index took 4 s on SQLite, more on Postgres).
        ledger = self.store.db.table(threads.name)
        totals = (
            "SELECT tkey, COUNT(*) AS n, CAST(SUM(size_bytes) AS BIGINT) AS size "  # noqa: S608
            f"FROM {self._by_thread()} GROUP BY tkey"
        )
        with_rows = (
            f"SELECT l.owner, COUNT(*), SUM(t.n), SUM(t.size), COUNT(l.tkey) "  # noqa: S608
            f"FROM ({totals}) t LEFT JOIN {ledger} l ON l.tkey = t.tkey GROUP BY l.owner"
        )
        recorded = f"SELECT owner, COUNT(*), COUNT(finished_at) FROM {ledger} GROUP BY owner"  # noqa: S608
        sums: dict[Any, list[Any]] = {}
        for owner, held, n, size, matched in self._answer("group threads by owner", with_rows):
            sums[owner] = [int(held) - int(matched or 0), int(n or 0), int(size or 0), 0]
        for owner, count, finished in self._answer("group the ledger by owner", recorded):
            entry = sums.setdefault(owner, [0, 0, 0, 0])
            entry[0] += int(count)
            entry[3] += int(finished or 0)
        return sums

    @reconnecting
    def _top_checkpoints(self, top: int) -> Table:
        mark, table = self.store.db.mark, self.store.sql.table
        picked = f"SELECT seq FROM {self._by_thread()} ORDER BY size_bytes DESC, seq LIMIT {mark}"  # noqa: S608
        query = (
            f"SELECT {', '.join('c.' + n for n in TOP_CHECKPOINT_ANSWER)} "  # noqa: S608
            f"FROM {table} c JOIN ({picked}) p ON p.seq = c.seq ORDER BY c.size_bytes DESC, c.seq"
        )
        rows = self._answer("list the largest checkpoints", query, (top,))
        return {n: [r[i] for r in rows] for i, n in enumerate(TOP_CHECKPOINT_ANSWER)}

    @reconnecting
    def _top_threads(self, top: int, by: str) -> Table:
        mark, table = self.store.db.mark, self.store.sql.table
        ledger = self.store.db.table(threads.name)
        # ``by`` is one of THREAD_RANKS (checked by the caller), the name of a column below.
        totals = (
            "SELECT tkey, COUNT(*) AS checkpoints, CAST(SUM(size_bytes) AS BIGINT) AS size_bytes, "  # noqa: S608
            "MAX(created_at) AS newest_at, MAX(seq) AS newest_seq "
            f"FROM {self._by_thread()} GROUP BY tkey ORDER BY {by} DESC, tkey LIMIT {mark}"
        )
        query = (
            "SELECT c.thread_id, l.owner, g.checkpoints, g.size_bytes, g.newest_at "  # noqa: S608
            f"FROM ({totals}) g JOIN {table} c ON c.seq = g.newest_seq "
            f"LEFT JOIN {ledger} l ON l.tkey = g.tkey AND l.thread_id = c.thread_id "
            f"ORDER BY g.{by} DESC, c.thread_id"
        )
        rows = self._answer("list the top threads", query, (top,))
        return {n: [r[i] for r in rows] for i, n in enumerate(TOP_THREAD_ANSWER)}

    @reconnecting
    def _store_totals(self) -> tuple[int, int]:
        query = f"SELECT COUNT(*), CAST(SUM(size_bytes) AS BIGINT) FROM {self._by_thread()}"  # noqa: S608
        count, size = self._answer("count checkpoints", query)[0]
        return int(count), int(size or 0)

    @reconnecting
    def _sample_columns(self, sample: int, rng: random.Random, columns: tuple[str, ...]) -> Table:
        # Random points of the seq range, each the first checkpoint at or after it (a primary
        # key lookup): uniform over seqs, so a gap left by deleted rows weighs its next row.
        # ``columns`` are checked names of CHECKPOINT_COLUMNS (header columns of the table).
        mark, table = self.store.db.mark, self.store.sql.table
        low, high = self._answer("sample checkpoints", f"SELECT MIN(seq), MAX(seq) FROM {table}")[0]  # noqa: S608
        found: dict[int, tuple[Any, ...]] = {}
        if low is not None:
            points = sorted(rng.randint(low, high) for _ in range(sample))
            with self.store.db.one("sample checkpoints") as conn:
                for chunk in chunks(points):
                    # One statement per 500 points: each the first row at or after it.
                    values = ", ".join([f"(CAST({mark} AS BIGINT))"] * len(chunk))
                    query = (
                        f"WITH pts(p) AS (VALUES {values}) "  # noqa: S608
                        f"SELECT c.seq, {', '.join('c.' + n for n in columns)} FROM pts "
                        f"JOIN {table} c ON c.seq = "
                        f"(SELECT MIN(n.seq) FROM {table} n WHERE n.seq >= pts.p)"
                    )
                    for row in conn.exec_driver_sql(query, tuple(chunk)):
                        found[int(row[0])] = tuple(row[1:])
        rows = list(found.values())
        return {name: [row[i] for row in rows] for i, name in enumerate(columns)}

    @reconnecting
    def _live_leases(self, thread_ids: list[str], now: datetime) -> list[str]:
        # The ledger's lease columns of these threads, 500 keys per statement.
        ledger, mark = self.store.db.table(threads.name), self.store.db.mark
        live: set[str] = set()
        with self.store.db.one("find live leases") as conn:
            for chunk in chunks(sorted(set(thread_ids))):
                query = (
                    f"SELECT thread_id FROM {ledger} WHERE tkey IN "  # noqa: S608
                    f"({', '.join([mark] * len(chunk))}) AND lease_holder IS NOT NULL "
                    f"AND lease_expires_at > {mark}"
                )
                params = (*(thread_key(t) for t in chunk), to_micros(now))
                live.update(r[0] for r in conn.exec_driver_sql(query, params) if r[0] in chunk)
        return [t for t in thread_ids if t in live]

    @reconnecting
    def _missing_rows(self) -> Table:
        # The outbox holds exactly the rows the plane lacks: each thread's first one, then one
        # walk of that thread's rows on the per-thread index, its row by key for the id.
        catch_up(self.store)
        table, box, _ = tables_of(self.store)
        ledger = self.store.db.table(threads.name)
        firsts = (
            f"SELECT c.tkey, MIN(c.seq) AS first FROM {box} o "  # noqa: S608
            f"{outbox_first(self.store)} {table} c ON c.seq = o.seq GROUP BY c.tkey"
        )
        query = f"""
SELECT f.thread_id, l.owner, t.n, t.kept, t.up_to, u.checkpoint_id, t.lost, f.sync_error
FROM (
  SELECT m.tkey, COUNT(*) AS n, SUM(CASE WHEN c.seq < m.first THEN 1 ELSE 0 END) AS kept,
         MAX(CASE WHEN c.seq < m.first THEN c.seq END) AS up_to,
         CAST(SUM(CASE WHEN c.seq >= m.first THEN c.size_bytes ELSE 0 END) AS BIGINT) AS lost,
         MIN(m.first) AS first
  FROM ({firsts}) m JOIN {self._by_thread("c")} ON c.tkey = m.tkey GROUP BY m.tkey
) t
JOIN (SELECT c.seq, c.thread_id, o.sync_error
      FROM {box} o {outbox_first(self.store)} {table} c ON c.seq = o.seq) f
  ON f.seq = t.first
LEFT JOIN {table} u ON u.seq = t.up_to
LEFT JOIN {ledger} l ON l.tkey = t.tkey AND l.thread_id = f.thread_id
ORDER BY f.thread_id"""  # noqa: S608 - quoted identifiers only
        rows = self._answer("find the rows the plane lacks", query)
        answer: Table = {name: [r[i] for r in rows] for i, name in enumerate(MISSING_ANSWER[:7])}
        answer["why"] = [f"quarantined: {r[7]}" if r[7] else PENDING_WHY for r in rows]
        for name in ("checkpoints", "restorable_checkpoints", "lost_bytes"):
            answer[name] = [int(v or 0) for v in answer[name]]
        return answer

    @reconnecting
    def _outbox_groups(self, totals: tuple[int, int] | None) -> Table:
        # The outbox holds the pending and quarantined rows (few); every other checkpoint is
        # synced: the store's totals (the per-thread index) less the outbox's, its attempts
        # those of the synced records (a delete removes a checkpoint's records with it).
        catch_up(self.store)
        table, box, done = tables_of(self.store)
        states = (
            f"SELECT CASE WHEN o.sync_error IS NOT NULL THEN 'quarantined' ELSE 'pending' END "  # noqa: S608
            f"AS outbox_state, COUNT(*), CAST(SUM(c.size_bytes) AS BIGINT), "
            f"CAST(SUM(o.attempts) AS BIGINT) FROM {box} o {outbox_first(self.store)} {table} c "
            "ON c.seq = o.seq "
            "GROUP BY outbox_state"
        )
        attempts = (
            f"SELECT CAST(SUM(s.attempts) AS BIGINT) FROM {done} s "  # noqa: S608
            f"WHERE NOT EXISTS (SELECT 1 FROM {box} o WHERE o.seq = s.seq)"
        )
        rows = self._answer("count the outbox by state", states)
        sums = {str(r[0]): [int(r[1]), int(r[2] or 0), int(r[3] or 0)] for r in rows}
        self._add_unqueued(sums)
        count, size = self._store_totals() if totals is None else totals
        synced = [count - sum(v[0] for v in sums.values()), size - sum(v[1] for v in sums.values())]
        if synced[0] > 0:
            (tried,) = self._answer("count the outbox by state", attempts)[0]
            sums["synced"] = [*synced, int(tried or 0)]
        return outbox_table(sums)

    def _add_unqueued(self, sums: dict[str, list[int]]) -> None:
        """SQLite: rows put since the catch-up, above the outbox mark, are pending too."""
        if not self.store.db.sqlite:
            return
        query = (
            f"SELECT COUNT(*), CAST(SUM(size_bytes) AS BIGINT) FROM {self.store.sql.table} "  # noqa: S608
            f"WHERE seq > {through(self.store)}"
        )
        count, size = self._answer("count the rows not yet queued", query)[0]
        if count:
            pending = sums.setdefault("pending", [0, 0, 0])
            pending[0] += int(count)
            pending[1] += int(size or 0)

    def _spans_sql(self) -> str:
        """Each row's span (``b`` start, ``l`` end, ``created``): its outbox row or synced record
        by key for each checkpoint of the per-thread index (no table read); rows synced with no
        recorded time left out."""
        _, box, done = tables_of(self.store)
        queued = through(self.store)  # a row above the mark has no outbox row yet: pending
        began = (
            "COALESCE(CASE WHEN o.seq IS NULL THEN s.pending_since ELSE o.pending_since END, "
            "c.created_at)"
        )
        return f"""
  SELECT {began} AS b, COALESCE(o.synced_at, s.synced_at) AS l, c.created_at AS created
  FROM {self._by_thread("c")} LEFT JOIN {box} o ON o.seq = c.seq
  LEFT JOIN {done} s ON s.seq = c.seq
  WHERE (o.seq IS NOT NULL AND o.sync_error IS NULL) OR o.synced_at IS NOT NULL
     OR s.synced_at IS NOT NULL OR (o.seq IS NULL AND c.seq > {queued})"""  # noqa: S608 - quoted identifiers only

    @reconnecting
    def _pending_spans(self, step: int, origin: int) -> dict[tuple[int, int | None], list[int]]:
        # Grouped after the spans covering no instant are dropped: the database sorts only the
        # spans that cross an instant (a few per instant), not every row.
        catch_up(self.store)
        mark = self.store.db.mark

        def index(at: str) -> str:  # the ceiling of (at - origin) / step, for either sign
            return (
                f"CASE WHEN {at} - {mark} > 0 THEN ({at} - {mark} + {mark} - 1) / {mark} "
                f"ELSE -(({mark} - {at}) / {mark}) END"
            )

        query = f"""
SELECT starts, ends, COUNT(*), MIN(created) FROM (
  SELECT {index("x.b")} AS starts, {index("x.l")} AS ends, x.created FROM ({self._spans_sql()}) x
) y
WHERE ends IS NULL OR ends > starts
GROUP BY starts, ends"""  # noqa: S608 - quoted identifiers only, every value bound
        params = (origin, origin, step, step, origin, step) * 2
        return {
            (int(r[0]), None if r[1] is None else int(r[1])): [int(r[2]), int(r[3])]
            for r in self._answer("group the pending spans", query, params)
        }

    @reconnecting
    def _oldest_write(self) -> int | None:
        query = f"SELECT MIN(created_at) FROM {self._by_thread()}"  # noqa: S608
        (found,) = self._answer("find the oldest write", query)[0]
        return None if found is None else int(found)
