"""The SQL store's hot statements as plain driver SQL, and the mapping of rows to parameters.

The hot paths run on a DBAPI cursor and skip SQLAlchemy's statement and result layers, which
cost more than the query on a 2 KB checkpoint (see ``benchmarks/RESULTS.md``): parameters go
to the driver as one tuple in its own placeholder style, and the table names are qualified
with the schema here. Identifiers are quoted by the dialect and every value is a bound
parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from durability._util import CHUNK
from durability.clock import from_micros, to_micros
from durability.stores.rows import (
    SAVER_FIELDS,
    STORED_FIELDS,
    WRITE_FIELDS,
    EncodedCheckpoint,
    EncodedWrite,
    Select,
)
from durability.stores.sql.schema import (
    SEQ_FLOOR_KEY,
    checkpoint_key,
    checkpoints,
    meta_table,
    parks,
    thread_key,
    threads,
    tombstones,
    write_key,
    writes,
)

_CREATED_AT = STORED_FIELDS.index("created_at")
#: :meth:`Statements.thread_key` keeps the keys of at most this many thread ids (then starts
#: over), each at most this long: a read of a thread seen before hashes nothing.
_CACHED_KEYS, _CACHED_ID_LENGTH = 4096, 256


class Statements:
    """The put and read statements of one store, built once (and per query shape, cached)."""

    _INSERTED = (*STORED_FIELDS, "tkey", "ckey")
    #: The columns :attr:`insert` writes, in :meth:`insert_params`'s order (without its last).
    inserted = _INSERTED

    def __init__(self, dialect: sa.Dialect, schema: str | None) -> None:
        quote = dialect.identifier_preparer.quote

        def table(t: sa.Table) -> str:
            return f"{quote(schema)}.{quote(t.name)}" if schema else quote(t.name)

        self.mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self.table = table(checkpoints)
        self.writes_table = table(writes)
        #: SQLite's rebuilt table (version 15): ids indexed as they are, ``(thread_id,
        #: namespace, checkpoint_id)``, and a seq computed above the floor (see ``rebuild.py``).
        self.sqlite = self.id_indexed = dialect.name == "sqlite"
        self._cache: dict[tuple[Any, ...], str] = {}
        self._thread_keys: dict[str, str] = {}
        self._put_statement(dialect, quote, table(meta_table), table(tombstones))
        self._read_statements(quote)
        self._sweep_statements(table)

    def _put_statement(self, dialect: sa.Dialect, quote: Any, meta: str, stones: str) -> None:
        """:attr:`insert`: a checkpoint's row, refused (no row back) for an erased thread."""
        mark = self.mark
        names = ", ".join(quote(c) for c in self._INSERTED)
        if dialect.name == "postgresql":  # a SELECT list does not take the columns' types
            marks = ", ".join(
                f"{mark}::{checkpoints.c[c].type.compile(dialect)}" for c in self._INSERTED
            )
        else:
            marks = ", ".join([mark] * len(self._INSERTED))
        #: The erased-thread check rides the insert: no row comes back for a tombstoned thread
        #: (one more index probe; an erase locks the table, so the check cannot race it).
        self.tombstones = stones
        if self.sqlite:
            names, marks = f"seq, {names}", f"{self._next_seq(meta)}, {marks}"
        self.insert = (
            f"INSERT INTO {self.table} ({names}) SELECT {marks} WHERE NOT EXISTS "  # noqa: S608
            f"(SELECT 1 FROM {stones} WHERE ekey = {mark}) RETURNING seq"
        )

    def _read_statements(self, quote: Any) -> None:
        """The column lists, :attr:`get`, and the pending writes a saver reads with a row."""
        mark = self.mark
        # Postgres compares text in the database's collation; "C" is code point order, which
        # is what LangGraph's string comparison of checkpoint ids means.
        self.by_id = 'checkpoint_id COLLATE "C"' if not self.sqlite else "checkpoint_id"
        self.columns = ", ".join(quote(c) for c in (*STORED_FIELDS, "seq"))
        #: :attr:`columns` of the checkpoints table aliased ``c`` in a join.
        self.qualified_columns = ", ".join("c." + quote(c) for c in (*STORED_FIELDS, "seq"))
        by_ids = f"thread_id = {mark} AND namespace = {mark} AND checkpoint_id = {mark}"
        if not self.sqlite:  # Postgres finds it through the hashes (a 10 KB id is not indexed)
            by_ids = f"tkey = {mark} AND ckey = {mark} AND {by_ids}"
        self.get = f"SELECT {self.columns} FROM {self.table} WHERE {by_ids}"  # noqa: S608
        #: The newest row of a thread and namespace (``store.latest``), with :meth:`latest_params`.
        self.latest = self._thread_rows(Select("", "", order="seq_desc", limit=1))
        self.write_columns = ", ".join(quote(c) for c in WRITE_FIELDS)
        # A row's pending writes as one JSON text, an array of [id, task_id, idx, channel,
        # value, task_path]: a saver reads a checkpoint and its writes in one statement.
        item = "w.id, w.task_id, w.idx, w.channel, w.value, w.task_path"
        agg = (
            f"json_group_array(json_array({item}))"
            if self.sqlite
            else f"json_agg(json_build_array({item}))::text"
        )
        self._saver_columns = ", ".join(quote(c) for c in SAVER_FIELDS)
        #: The extra column of :meth:`select_with_writes`, correlated to the row aliased ``c``.
        self._writes_column = (
            f"(SELECT {agg} FROM {self.writes_table} AS w "  # noqa: S608
            "WHERE w.tkey = c.tkey AND w.ckey = c.ckey AND w.thread_id = c.thread_id "
            "AND w.namespace = c.namespace AND w.checkpoint_id = c.checkpoint_id)"
        )

    def _sweep_statements(self, table: Any) -> None:
        """The sweep's statements on Postgres, over a batch of (tkey, thread_id) pairs sent once.

        The keys go as one comma-joined text (hex never holds a comma), the ids as a binary
        array (psycopg dumps a text array with a regex match per element, and placeholder lists
        of 1,000 cost it more to parse than the deletes). Each deletes or reads by the pair.
        """
        ids = (
            "WITH ids AS (SELECT * FROM unnest(string_to_array(%s, ','), %b::text[]) "
            "AS ids (tkey, thread_id))"
        )
        by_pair = "USING ids WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id"
        deletes = ", ".join(
            f"{name} AS (DELETE FROM {table(t)} AS t {by_pair} RETURNING t.tkey)"  # noqa: S608
            for name, t in (("c", checkpoints), ("w", writes), ("p", parks), ("l", threads))
        )
        #: Every table in one statement, counted per thread server-side.
        self.sweep_delete = (
            f"{ids}, {deletes} SELECT tkey, 0, count(*) FROM c GROUP BY tkey "  # noqa: S608
            "UNION ALL SELECT tkey, 1, count(*) FROM w GROUP BY tkey"
        )
        #: The threads among them still holding a checkpoint or a pending write.
        self.sweep_holding = (
            f"{ids} SELECT t.tkey FROM {table(checkpoints)} AS t, ids "  # noqa: S608
            "WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id "
            f"UNION SELECT t.tkey FROM {table(writes)} AS t, ids "
            "WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id"
        )

    def _next_seq(self, meta: str) -> str:
        """SQLite's next seq: above the newest row and above the floor deletes leave."""
        return (
            f"max(coalesce((SELECT max(seq) FROM {self.table}), 0), "  # noqa: S608
            f"coalesce((SELECT CAST(value AS INTEGER) FROM {meta} WHERE key = '{SEQ_FLOOR_KEY}'), "
            "0)) + 1"
        )

    def get_params(self, thread_id: str, namespace: str, checkpoint_id: str) -> tuple[str, ...]:
        """The parameters of :attr:`get` (on Postgres the two hashes first)."""
        if self.sqlite:
            return (thread_id, namespace, checkpoint_id)
        key = checkpoint_key(thread_id, namespace, checkpoint_id)
        return (self.thread_key(thread_id), key, thread_id, namespace, checkpoint_id)

    def thread_key(self, thread_id: str) -> str:
        """:func:`~durability.stores.sql.schema.thread_key`, a short thread id's hashed once."""
        tkey = self._thread_keys.get(thread_id)
        if tkey is None:
            tkey = thread_key(thread_id)
            if len(thread_id) <= _CACHED_ID_LENGTH:
                if len(self._thread_keys) >= _CACHED_KEYS:
                    self._thread_keys.clear()
                self._thread_keys[thread_id] = tkey
        return tkey

    def latest_params(self, thread_id: str, namespace: str) -> tuple[str, str, str]:
        """The parameters of :attr:`latest`."""
        return (self.thread_key(thread_id), thread_id, namespace)

    def select(self, query: Select) -> tuple[str, list[Any]]:
        """The statement and parameters that answer ``query``."""
        if (
            query.checkpoint_id is not None
            and query.namespace is not None
            and query.after_seq is None
            and query.before_id is None
        ):  # one checkpoint by id: through the unique key
            return self.get, list(
                self.get_params(query.thread_id, query.namespace, query.checkpoint_id)
            )
        params: list[Any] = [self.thread_key(query.thread_id), query.thread_id]
        for value in (query.namespace, query.checkpoint_id, query.after_seq, query.before_id):
            if value is not None:
                params.append(value)
        if query.limit is not None and query.limit != 1:
            params.append(query.limit)
        return self._thread_rows(query), params

    def select_with_writes(self, query: Select) -> tuple[str, list[Any]]:
        """:meth:`select` of a saver's columns (:data:`SAVER_FIELDS`) and one more: the pending
        writes of each row, as JSON text.

        For a saver's read of one checkpoint (by id or the greatest id), which then needs no
        second statement (on Postgres, no second round trip).
        """
        sql, params = self.select(query)
        key = ("with_writes", sql)
        found = self._cache.get(key)
        if found is None:
            plain = f"SELECT {self.columns} FROM {self.table}"  # noqa: S608
            assert sql.startswith(plain)
            found = self._cache[key] = (
                f"SELECT {self._saver_columns}, {self._writes_column} "  # noqa: S608
                f"FROM {self.table} AS c{sql[len(plain) :]}"
            )
        return found, params

    def _thread_rows(self, query: Select) -> str:
        """A thread's rows (in one namespace, after a seq, before an id), in the asked order."""
        key = (
            query.namespace is not None,
            query.checkpoint_id is not None,
            query.after_seq is not None,
            query.before_id is not None,
            # LIMIT 1 (latest) is written into the statement: with a parameter, Postgres's
            # generic plan of a prepared statement cannot count on one row (latest ~25 % slower).
            None if query.limit is None else min(query.limit, 2),
            query.order,
        )
        sql = self._cache.get(key)
        if sql is None:
            sql = self._cache[key] = self._build_thread_rows(*key)
        return sql

    def _build_thread_rows(
        self,
        namespace: bool,
        by_id: bool,
        after: bool,
        before: bool,
        limit: int | None,
        order: str,
    ) -> str:
        mark = self.mark
        where = f"tkey = {mark} AND thread_id = {mark}"
        if namespace:
            where += f" AND namespace = {mark}"
        if by_id:
            where += f" AND checkpoint_id = {mark}"
        if after:
            where += f" AND seq > {mark}"
        if before:
            where += f" AND {self.by_id} < {mark}"
        order_by = {"seq": "seq", "seq_desc": "seq DESC", "id_desc": f"{self.by_id} DESC"}[order]
        select = f"SELECT {self.columns} FROM {self.table}"  # noqa: S608
        limit_sql = "" if limit is None else " LIMIT 1" if limit == 1 else f" LIMIT {mark}"
        if limit is not None and order == "id_desc" and not (namespace and self.id_indexed):
            # Pick the rows by id first, so the sort never carries the payload columns (with a
            # namespace on SQLite, migration 5's index gives the order and nothing sorts).
            inner = f"SELECT seq FROM {self.table} WHERE {where} ORDER BY {order_by}{limit_sql}"  # noqa: S608
            return f"{select} WHERE seq IN ({inner}) ORDER BY {order_by}"
        return f"{select} WHERE {where} ORDER BY {order_by}{limit_sql}"

    def writes_of(self, count: int) -> str:
        """A thread's pending writes under ``count`` checkpoint keys, in write order."""
        key = ("writes_of", count)
        sql = self._cache.get(key)
        if sql is None:
            marks = ", ".join([self.mark] * count)
            sql = self._cache[key] = (
                f"SELECT {self.write_columns} FROM {self.writes_table} "  # noqa: S608
                f"WHERE tkey = {self.mark} AND thread_id = {self.mark} AND ckey IN ({marks}) "
                "ORDER BY id"
            )
        return sql

    @staticmethod
    def insert_params(row: EncodedCheckpoint, ekey: str) -> tuple[Any, ...]:
        """The parameters of :attr:`insert` for ``row``; ``ekey`` is its thread's tombstone hash."""
        values = list(row.values())
        values[_CREATED_AT] = to_micros(row.created_at)
        return (
            *values,
            thread_key(row.thread_id),
            checkpoint_key(row.thread_id, row.namespace, row.checkpoint_id),
            ekey,
        )


def row_values(row: EncodedCheckpoint) -> dict[str, Any]:
    """``row`` as the checkpoints table's column values (for a many-row insert)."""
    values: dict[str, Any] = dict(zip(STORED_FIELDS, row.values(), strict=True))
    values["created_at"] = to_micros(row.created_at)
    values["tkey"] = thread_key(row.thread_id)
    values["ckey"] = checkpoint_key(row.thread_id, row.namespace, row.checkpoint_id)
    return values


def encoded(row: Sequence[Any]) -> EncodedCheckpoint:
    """A selected row (``Statements.columns``) as the store's row."""
    found = EncodedCheckpoint(*row)
    found.created_at = from_micros(row[_CREATED_AT])
    return found


def write_values(w: EncodedWrite) -> dict[str, Any]:
    """``w`` as the writes table's column values."""
    return {
        "wkey": write_key(w.thread_id, w.namespace, w.checkpoint_id, w.task_id, w.idx),
        "tkey": thread_key(w.thread_id),
        "ckey": checkpoint_key(w.thread_id, w.namespace, w.checkpoint_id),
        **{name: getattr(w, name) for name in WRITE_FIELDS},
    }


def padded_size(n: int) -> int:
    """``n`` rounded up to a power of two, at most one chunk (``chunks``'s size)."""
    return min(1 << (n - 1).bit_length(), CHUNK)
