"""The SQL store's whole-store reads (frames, the sweep's plan) and the sweep's batched delete.

Every read is one or two set-based statements streamed in chunks on the DBAPI cursor; the
sweep deletes many threads per transaction, in thread-key order, so a batch rewrites adjacent
index leaves.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from durability._util import chunks
from durability.clock import from_micros
from durability.model import Deleted, Lease, ThreadRecord
from durability.stores.rows import CheckpointAddress
from durability.stores.scans import (
    OUTBOX_COLUMNS,
    THREAD_COLUMNS,
    Columns,
    Scans,
    SweepColumns,
    columns_of,
)
from durability.stores.sql.aggregates import SQLAggregates
from durability.stores.sql.engine import reconnecting
from durability.stores.sql.outbox import entry_join, entry_sql
from durability.stores.sql.outbox_queue import catch_up
from durability.stores.sql.schema import (
    ID_INDEX_CHARS,
    checkpoints,
    delta,
    parks,
    thread_key,
    threads,
    time_of,
    writes,
)
from durability.stores.sql.sweep_lock import SQLSweepLock
from durability.stores.sql.write_history import SQLWriteHistory
from durability.stores.sweep_lock import SweepLock

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore


def _prefix_range(col: Any, prefix: str, after: str | None) -> list[Any]:
    """The conditions of ids starting with ``prefix`` (a range: ``[prefix, next)``, where
    ``next`` is ``prefix`` with its last character one code point up) and above ``after``."""
    where = [col >= prefix] if prefix else []
    if prefix:
        last = ord(prefix[-1]) + 1
        last = 0xE000 if 0xD800 <= last < 0xE000 else last
        if last <= 0x10FFFF:
            where.append(col < prefix[:-1] + chr(last))
    if after is not None:
        where.append(col > after)
    return where


#: SQLite page cache of a sweep's delete transaction, in KiB (the connection's own is restored).
SWEEP_CACHE_KIB = 65536

#: The ThreadRecord fields a thread without a ledger row leaves empty.
_LEDGER_FIELDS = (
    "owner",
    "run_id",
    "started_at",
    "declared_waiting",
    "declared_finished",
    "finished_at",
    "due_at",
    "lease",
)

#: The sweep's columns read from the ledger, and their places in a ledger row.
_SWEEP_LEDGER_VALUES = (
    ("started_at", 4),
    ("finished_at", 7),
    ("due_at", 8),
    ("declared_waiting", 5),
    ("declared_finished", 6),
    ("lease_expires_at", 12),
)


class SQLScans(SQLWriteHistory, SQLAggregates, Scans):
    """Analysis and sweep reads in a few set-based statements."""

    store: SQLStore

    def sweep_lock(self) -> SweepLock:
        return SQLSweepLock(self.store)

    # ------------------------------------------------------------------ analysis reads

    @reconnecting
    def _checkpoint_buckets(self, step: int, last: int | None) -> Columns:
        db, table = self.store.db, self.store.sql.table
        # The window's start from the newest write, in the same statement (computed once).
        since = f" WHERE created_at >= (SELECT MAX(created_at) FROM {table}) - {db.mark}"  # noqa: S608
        query = (
            f"SELECT (created_at / {db.mark}) * {db.mark} AS b, COUNT(*), SUM(size_bytes) "  # noqa: S608
            f"FROM {table}{'' if last is None else since} GROUP BY b ORDER BY b"
        )
        params = (step, step) if last is None else (step, step, last)
        with db.one("count checkpoints per bucket") as conn:
            rows = conn.exec_driver_sql(query, params).all()
        return {
            "bucket": [int(r[0]) for r in rows],
            "checkpoints": [int(r[1]) for r in rows],
            "size_bytes": [int(r[2] or 0) for r in rows],
        }

    @reconnecting
    def _find_threads(self, prefix: str, after: str | None, limit: int) -> list[str]:
        # A range on the ledger's thread id index (code point order: SQLite's binary order,
        # Postgres's "C" collation); a store with no ledger rows reads its checkpoints' ids.
        postgres = self.store.db.engine.dialect.name == "postgresql"
        with self.store.db.read("search threads") as conn:
            ledger = conn.execute(sa.select(threads.c.tkey).limit(1)).first() is not None
            table = threads if ledger else checkpoints
            col: Any
            if not postgres:
                col = table.c.thread_id
                query = sa.select(col).where(*_prefix_range(col, prefix, after)).order_by(col)
            else:
                # The index holds the ids' first characters (migration 13): the range is asked
                # of them, the exact conditions of the whole id, in the same order.
                col = table.c.thread_id.collate("C")
                chars: Any = sa.literal_column(str(ID_INDEX_CHARS))  # as the index writes it
                head = sa.func.left(table.c.thread_id, chars).collate("C")
                cut = None if after is None else after[:ID_INDEX_CHARS]
                query = (
                    sa.select(col.label("thread_id"), head)  # DISTINCT orders by what it selects
                    .where(*_prefix_range(head, prefix[:ID_INDEX_CHARS], None))
                    .where(*([] if cut is None else [head >= cut]))
                    .where(*_prefix_range(col, prefix, after))
                    .order_by(head, col)
                )
            if not ledger:
                query = query.distinct()
            return list(conn.execute(query.limit(limit)).scalars())

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        db, sql = self.store.db, self.store.sql
        # The outbox state comes from the outbox tables, joined only when it is asked for.
        outbox = {"synced", "sync_error"} & set(columns)
        if outbox:
            catch_up(self.store)
        entry = entry_sql(self.store)
        names = [entry[c] if c in ("synced", "sync_error") else f"c.{c}" for c in columns]
        query = f"SELECT {', '.join(names)} "
        if outbox:
            query += entry_join(self.store)
        else:
            query += f"FROM {sql.table} c"
        params: list[Any] = []
        if thread_id is not None:
            query += f" WHERE c.tkey = {db.mark} AND c.thread_id = {db.mark}"
            params = [thread_key(thread_id), thread_id]
        rows_of = db.stream(
            "read checkpoint columns", query, params, chunk_size, whole=thread_id is None
        )
        for rows in rows_of:
            yield columns_of(columns, rows)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        # THREAD_COLUMNS from "owner" on are the ledger's columns, under the same names.
        ledger = THREAD_COLUMNS[THREAD_COLUMNS.index("owner") :]
        ledger_cols = ", ".join("l." + name for name in ledger)
        table = self.store.db.table(threads.name)
        query = f"""
WITH t AS ({self._thread_totals()})
SELECT t.thread_id, t.n, t.size, t.first_at, t.newest_at, t.max_gap, t.status, t.run_id,
       {ledger_cols}
FROM t LEFT JOIN {table} l ON l.tkey = t.tkey AND l.thread_id = t.thread_id
UNION ALL
SELECT l.thread_id, 0, 0, NULL, NULL, NULL, NULL, NULL, {ledger_cols}
FROM {table} l LEFT JOIN t ON t.tkey = l.tkey AND t.thread_id = l.thread_id
WHERE t.tkey IS NULL
"""  # noqa: S608 - quoted identifiers only, no values
        for rows in self.store.db.stream("read thread columns", query, [], chunk_size):
            yield columns_of(THREAD_COLUMNS, rows)

    def _lean_thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        # The totals are one GROUP BY on the walk of the (tkey, seq, created_at, size_bytes)
        # index: no window and no sort (about half the LAG's statement), joined to the ledger
        # by thread key as the sweep's read is. The newest row is read (by primary key) only
        # for a thread the ledger lacks, as a scalar subquery that is not run otherwise (on
        # 10,000,000 rows, reading every thread's newest row was as long as the rest).
        ledger = THREAD_COLUMNS[THREAD_COLUMNS.index("owner") :]
        ledger_cols = ", ".join("l." + name for name in ledger)
        table, cps = self.store.db.table(threads.name), self.store.sql.table
        newest = f"FROM {cps} c WHERE c.seq = g.newest_seq"
        totals = f"""
  SELECT tkey, count(*) AS n, CAST(sum(size_bytes) AS BIGINT) AS size,
         min(created_at) AS first_at, max(created_at) AS newest_at, max(seq) AS newest_seq
  FROM {self._history_index()} GROUP BY tkey"""  # noqa: S608 - the index walk
        if not self.store.db.sqlite:  # hashed (10M rows: 4.5 s, not 8.3 s with index probes)
            query = f"""
SELECT COALESCE(l.thread_id, (SELECT c.thread_id {newest})), COALESCE(g.n, 0),
       COALESCE(g.size, 0), g.first_at, g.newest_at, NULL, NULL,
       CASE WHEN l.tkey IS NULL THEN (SELECT c.run_id {newest}) END, {ledger_cols}
FROM ({totals}) AS g FULL JOIN {table} l ON l.tkey = g.tkey"""  # noqa: S608
        else:  # the totals kept once, in memory; the ledger scanned, probing them (10M: 2 s less)
            query = f"""
WITH g AS ({totals})
SELECT l.thread_id, COALESCE(g.n, 0), COALESCE(g.size, 0), g.first_at, g.newest_at,
       NULL, NULL, NULL, {ledger_cols}
FROM {table} l LEFT JOIN g ON g.tkey = l.tkey
UNION ALL
SELECT (SELECT c.thread_id {newest}), g.n, g.size, g.first_at, g.newest_at, NULL, NULL,
       (SELECT c.run_id {newest}), {", ".join(["NULL"] * len(ledger))}
FROM g WHERE NOT EXISTS (SELECT 1 FROM {table} l WHERE l.tkey = g.tkey)"""  # noqa: S608
        for rows in self.store.db.stream("read thread columns", query, [], chunk_size):
            yield columns_of(THREAD_COLUMNS, rows)

    def _thread_totals(self) -> str:
        """Per thread: count, bytes, first and newest time, longest gap, the newest row's status.

        One pass of ``LAG`` over each thread's rows in write order gives the gaps, grouped by
        the thread key (the 128-bit hash standing for the id, as the sweep's totals): every
        column it reads is in the ``(tkey, seq, created_at, size_bytes)`` index, so the pass
        walks that index in order, with no table read and no sort. The id, status and run come
        from the newest row, by primary key.
        """
        cps = self.store.sql.table
        return f"""
  SELECT g.tkey, c.thread_id, g.n, g.size, g.first_at, g.newest_at, g.max_gap,
         c.status, c.run_id
  FROM (
    SELECT tkey, count(*) AS n, CAST(sum(size_bytes) AS BIGINT) AS size,
           min(created_at) AS first_at, max(created_at) AS newest_at, max(gap) AS max_gap,
           max(seq) AS newest_seq
    FROM (
      SELECT tkey, seq, created_at, size_bytes,
             created_at - LAG(created_at) OVER (PARTITION BY tkey ORDER BY seq) AS gap
      FROM {self._history_index()}
    ) AS w
    GROUP BY tkey
  ) AS g JOIN {cps} c ON c.seq = g.newest_seq"""  # noqa: S608

    def _outbox_columns(self, chunk_size: int) -> Iterator[Columns]:
        catch_up(self.store)
        entry = entry_sql(self.store)
        query = f"SELECT {', '.join(entry[c] for c in OUTBOX_COLUMNS)} "
        query += entry_join(self.store)
        for rows in self.store.db.stream("read outbox columns", query, [], chunk_size):
            yield columns_of(OUTBOX_COLUMNS, rows)

    @reconnecting
    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[CheckpointAddress]:
        c = checkpoints.c
        found: list[CheckpointAddress] = []
        with self.store.db.read("find the checkpoints of runs") as conn:
            for chunk in chunks(run_ids):
                query = (
                    sa.select(c.thread_id, c.namespace, c.checkpoint_id)
                    .where(c.run_id.in_(chunk))
                    .order_by(c.seq)
                )
                found += [(r.thread_id, r.namespace, r.checkpoint_id) for r in conn.execute(query)]
        return found

    # ------------------------------------------------------------------ sweep reads

    def _sweep_records(self) -> list[ThreadRecord]:
        columns = self._sweep_columns()
        return [columns.record(i) for i in range(len(columns))]

    def _sweep_columns(self) -> SweepColumns:
        # The ledger's rows, then the totals of threads it lacks; the columns are taken from the
        # raw rows and joined in numpy (a loop over 1,000,000 row pairs was seconds), and a
        # row's ThreadRecord is built only when the plan asks for it.
        import numpy as np

        ledger, totals, found, names = self._sweep_rows()
        none = np.iinfo(np.int64).min
        of_ledger = np.full(len(ledger), -1, dtype=np.int64)  # each ledger row's totals row
        hit = found >= 0
        of_ledger[found[hit]] = np.flatnonzero(hit)
        lone = np.flatnonzero(~hit)  # the totals rows of threads the ledger lacks
        values: dict[str, Any] = {}
        for name, k in (("checkpoints", 1), ("size_bytes", 2), ("newest_at", 3)):
            column = _ints(totals, k)  # and int64's minimum at -1, for ledger rows without totals
            values[name] = np.concatenate([np.append(column, none)[of_ledger], column[lone]])
        for name, k in _SWEEP_LEDGER_VALUES:
            values[name] = np.concatenate([_ints(ledger, k), np.full(len(lone), none)])
        ids = list(map(itemgetter(1), ledger)) + [names[totals[j][4]] for j in lone]

        def record(i: int) -> ThreadRecord:
            if i < len(ledger):
                j = of_ledger[i]
                return _sweep_record(ledger[i], totals[j] if j >= 0 else None)
            return _sweep_record(None, totals[lone[i - len(ledger)]], ids[i])

        return SweepColumns.of_ints(ids, values, record)

    @reconnecting
    def _sweep_rows(self) -> tuple[list[Any], list[Any], Any, dict[int, str]]:
        """The raw ledger rows, the raw totals rows, the ledger row of each totals row (an
        int64 array, -1 where the ledger lacks the thread), and the names of those threads.

        Two statements in one snapshot, on the DBAPI cursor (SQLAlchemy's row layer cost more
        than the queries): per-thread totals from one GROUP BY over the thread index (by
        thread key, the 128-bit hash standing for the id), and the whole ledger. A thread
        with checkpoints but no ledger row takes its id from its newest row.
        """
        import numpy as np

        db = self.store.db
        totals_sql = (
            "SELECT tkey, count(*), sum(size_bytes), max(created_at), max(seq) "  # noqa: S608
            f"FROM {db.table(checkpoints.name)} GROUP BY tkey"
        )
        ledger_columns = ", ".join(c.name for c in threads.c)
        action = "read the threads for the sweep"
        with db.read(action) as conn, db.cursor(action, conn) as cursor:
            cursor.execute(totals_sql)
            totals = cursor.fetchall()
            cursor.execute(f"SELECT {ledger_columns} FROM {db.table(threads.name)}")  # noqa: S608
            ledger = cursor.fetchall()
            row_of = dict(zip(map(itemgetter(0), ledger), itertools.count()))
            keys = map(itemgetter(0), totals)
            found = np.fromiter(map(row_of.get, keys, itertools.repeat(-1)), np.int64, len(totals))
            names = self._names(cursor, [totals[j][4] for j in np.flatnonzero(found < 0)])
        return ledger, totals, found, names

    def _names(self, cursor: Any, seqs: list[int]) -> dict[int, str]:
        """The thread id of each of these checkpoint rows (by ``seq``).

        Postgres takes every seq in one text parameter, split server-side (``= ANY``): 500
        placeholders per statement cost psycopg more than the lookups, and dumping a list of
        100,000 ints as an array parameter cost ~0.2 s more than joining them.
        """
        db = self.store.db
        table = db.table(checkpoints.name)
        names: dict[int, str] = {}
        if not db.sqlite and seqs:
            cursor.execute(
                f"SELECT seq, thread_id FROM {table} "  # noqa: S608
                "WHERE seq = ANY(string_to_array(%s, ',')::bigint[])",
                [",".join(map(str, seqs))],
            )
            names.update(cursor.fetchall())
            return names
        for chunk in chunks(seqs):
            cursor.execute(
                f"SELECT seq, thread_id FROM {table} "  # noqa: S608
                f"WHERE seq IN ({', '.join([db.mark] * len(chunk))})",
                chunk,
            )
            names.update(cursor.fetchall())
        return names

    # ------------------------------------------------------------------ sweep deletes

    def delete_order(self, thread_ids: Sequence[str]) -> list[str]:
        # By thread key: the indexes a delete rewrites lead with it, so a batch of neighbouring
        # keys rewrites a run of adjacent leaves, where ids in any other order land on a random
        # leaf each (1,000 threads of a 100,000-thread store: about 80 leaves per index instead
        # of about 1,000).
        return sorted(thread_ids, key=thread_key)

    @reconnecting  # a dropped connection rolls the transaction back: sending it again is sound
    def _delete_threads(self, thread_ids: list[str]) -> dict[str, Deleted]:
        # Set-based, in one transaction, on the transaction's cursor with plain driver SQL and
        # every value bound (compiling SQLAlchemy's expanding IN lists cost a sixth of a sweep).
        # What went is counted by thread key (a SQLite writer waits on BEGIN IMMEDIATE meanwhile).
        keys = [thread_key(t) for t in thread_ids]
        by_key = dict(zip(keys, thread_ids, strict=True))
        counts = {t: [0, 0] for t in thread_ids}
        db = self.store.db
        with db.write("delete threads") as conn, db.cursor("delete threads", conn) as cursor:
            for tkey, slot, n in self._deletes(cursor, keys, thread_ids):
                counts[by_key[tkey]][slot] += n
        return {t: Deleted(checkpoints=n, writes=w) for t, (n, w) in counts.items()}

    def _deletes(
        self, cursor: Any, keys: list[str], thread_ids: list[str]
    ) -> Iterator[tuple[str, int, int]]:
        """Delete the threads from the four tables; ``(tkey, slot, rows)`` for what went, slot 0
        counting checkpoints and 1 pending writes."""
        db = self.store.db
        if not db.sqlite:
            # One statement for the four tables, grouped server-side (a row per thread).
            cursor.execute(self.store.sql.sweep_delete, [",".join(keys), thread_ids])
            yield from cursor.fetchall()
            return
        # A batch dirties a few thousand pages; in SQLite's default 2 MB cache they spill to the
        # WAL mid-transaction and are read back, so the transaction gets 64 MB, given back after.
        (cache,) = cursor.execute("PRAGMA cache_size").fetchone()
        cursor.execute(f"PRAGMA cache_size = -{SWEEP_CACHE_KIB}")
        try:
            for where, params in _sqlite_batches(keys, thread_ids):
                for table, slot in ((checkpoints, 0), (writes, 1), (parks, None), (threads, None)):
                    sql = f"DELETE FROM {db.table(table.name)} WHERE {where}"  # noqa: S608
                    if slot is None:
                        cursor.execute(sql, params)
                    else:
                        cursor.execute(sql + " RETURNING tkey", params)
                        yield from ((tkey, slot, 1) for (tkey,) in cursor.fetchall())
        finally:
            cursor.execute(f"PRAGMA cache_size = {int(cache)}")

    @reconnecting
    def _still_holding(self, thread_ids: list[str]) -> set[str]:
        # One read instead of a second round of four DELETEs that would find nothing: on a
        # 20,000-thread Postgres sweep it took 7,700 threads/s to 13,100 (benchmarks/RESULTS.md).
        keys = [thread_key(t) for t in thread_ids]
        by_key = dict(zip(keys, thread_ids, strict=True))
        found: set[str] = set()
        action = "check threads are empty"
        db = self.store.db
        with db.read(action) as conn, db.cursor(action, conn) as cursor:
            if not db.sqlite:
                cursor.execute(self.store.sql.sweep_holding, [",".join(keys), thread_ids])
                found.update(by_key[tkey] for (tkey,) in cursor.fetchall())
                return found
            cps, wrs = db.table(checkpoints.name), db.table(writes.name)
            for where, params in _sqlite_batches(keys, thread_ids):
                cursor.execute(
                    f"SELECT tkey FROM {cps} WHERE {where} "  # noqa: S608
                    f"UNION SELECT tkey FROM {wrs} WHERE {where}",
                    params + params,
                )
                found.update(by_key[tkey] for (tkey,) in cursor.fetchall())
        return found


def _sqlite_batches(keys: list[str], thread_ids: list[str]) -> Iterator[tuple[str, list[Any]]]:
    """A WHERE clause on ``tkey`` and ``thread_id`` and its parameters per 500 ids."""
    for chunk, ids in zip(chunks(keys), chunks(thread_ids), strict=True):
        marks = ", ".join(["?"] * len(chunk))
        yield f"tkey IN ({marks}) AND thread_id IN ({marks})", [*chunk, *ids]


def _ints(rows: Sequence[Sequence[Any]], k: int) -> Any:
    """Field ``k`` of every row as an int64 array, int64's minimum where it is ``None``."""
    import numpy as np

    column = np.empty(len(rows), dtype=object)
    column[:] = list(map(itemgetter(k), rows))
    return np.where(column == None, np.iinfo(np.int64).min, column).astype(np.int64)  # noqa: E711


def _sweep_record(
    ledger: Sequence[Any] | None, totals: Sequence[Any] | None, name: str = ""
) -> ThreadRecord:
    """A :class:`ThreadRecord` from a raw ledger row (``threads`` columns in order) and totals row.

    Built without ``ThreadRecord.__post_init__``: it converts each time to UTC, and these come
    from :func:`from_micros`, aware UTC already; the conversion was most of the time a
    100,000-thread plan spent building records.
    """
    n, size, newest_at, newest_seq = totals[1:5] if totals is not None else (0, 0, None, None)
    record = object.__new__(ThreadRecord)
    put = object.__setattr__
    put(record, "checkpoints", int(n))
    put(record, "size_bytes", int(size or 0))
    put(record, "newest_at", None if newest_at is None else from_micros(newest_at))
    put(record, "newest_seq", newest_seq)
    if ledger is None:
        for field in _LEDGER_FIELDS:
            put(record, field, None)
        put(record, "thread_id", name)
        return record
    (_k, thread_id, owner, run_id, started, waiting, finished, finished_at, due, holder) = ledger[
        :10
    ]
    put(record, "thread_id", thread_id)
    put(record, "owner", owner)
    put(record, "run_id", run_id)
    put(record, "started_at", None if started is None else from_micros(started))
    put(record, "declared_waiting", delta(waiting))
    put(record, "declared_finished", delta(finished))
    put(record, "finished_at", None if finished_at is None else from_micros(finished_at))
    put(record, "due_at", None if due is None else from_micros(due))
    put(record, "lease", None if holder is None else _sweep_lease(ledger))
    return record


def _sweep_lease(ledger: Sequence[Any]) -> Lease:
    thread_id, (holder, run_id, acquired, expires) = ledger[1], ledger[9:13]
    return Lease(
        thread_id=thread_id,
        holder=holder,
        run_id=run_id or "",
        acquired_at=time_of(acquired),
        expires_at=from_micros(expires),
    )
