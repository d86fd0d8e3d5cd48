"""The raw reads the doctor needs that the store contract does not offer, one per provider.

The contract answers by thread and by id; the doctor asks store-wide questions ("every pending
write whose checkpoint is gone"). SQL stores answer each in one anti-join, Redis with a ``SCAN``
and pipelined hash reads per thread, memory from its dicts. Rows are never decoded: a missing
parent is found from the checkpoints' id columns, whatever their payloads hold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from durability.model import STEP_FORK_ORIGIN, Checkpoint
from durability.stores.rows import CheckpointRow, EncodedCheckpoint, Select

if TYPE_CHECKING:
    from durability.stores.base import Store

#: A pending write's address in its thread: namespace, checkpoint id, task id, idx.
WriteKey = tuple[str, str, str, int]
#: A checkpoint whose parent is absent: namespace, checkpoint id, parent id.
Orphan = tuple[str, str, str]

SQL_PROVIDERS = ("sqlite", "postgres")


def orphan_writes(store: Store) -> dict[str, list[WriteKey]]:
    """Per thread, its pending writes whose checkpoint the store does not hold."""
    if store.provider in SQL_PROVIDERS:
        return _sql_orphan_writes(store)
    if store.provider == "redis":
        return _redis_orphan_writes(store)
    return _memory_orphan_writes(store)


def missing_parents(store: Store, thread_ids: list[str] | None = None) -> dict[str, list[Orphan]]:
    """Per thread (of ``thread_ids``, default every thread), checkpoints whose parent is not
    in their thread and namespace.

    Left out, where the seeds expect a missing parent: a ``fork_origin`` row (its parent is in
    the source thread), and the oldest row of its thread and namespace (a restore that brought
    back only the latest checkpoint, a thread thinned to its latest by ``prune``). A parent is
    reported missing only when the chain breaks in the middle: an older row is still there.
    """
    if store.provider in SQL_PROVIDERS:
        return _sql_missing_parents(store, thread_ids)
    if thread_ids is None:
        thread_ids = [record.thread_id for record in store.iter_threads()]
    found: dict[str, list[Orphan]] = {}
    for thread_id in thread_ids:
        rows = [header(r) for r in store._select(Select(thread_id, None))]
        broken = _broken_chain(
            [(r.namespace, r.checkpoint_id, r.parent_checkpoint_id, r.step_type) for r in rows]
        )
        if broken:
            found[thread_id] = broken
    return found


def header(row: CheckpointRow) -> EncodedCheckpoint | Checkpoint:
    """A row's id and step fields: the stored row itself where the store returns encoded rows
    (nothing decoded), else the decoded checkpoint."""
    return row if isinstance(row, EncodedCheckpoint) else row.decode()


def _broken_chain(rows: list[tuple[str, str, str | None, str | None]]) -> list[Orphan]:
    """Of a thread's rows in write order, those whose parent is absent below an older row."""
    ids = {(ns, cid) for ns, cid, _, _ in rows}
    seen: set[str] = set()
    broken = []
    for ns, cid, parent, step_type in rows:
        if parent and step_type != STEP_FORK_ORIGIN and ns in seen and (ns, parent) not in ids:
            broken.append((ns, cid, parent))
        seen.add(ns)
    return broken


def ledger_threads(store: Store, which: str) -> list[str]:
    """Ids of ledger threads: ``empty`` (a ledger record, no checkpoint) or ``leased`` (a
    lease recorded)."""
    if store.provider in SQL_PROVIDERS:
        return _sql_ledger_threads(store, which)
    import numpy as np

    columns = store.scans.sweep_columns().columns
    if which == "empty":
        mask = columns["checkpoints"] == 0
    else:
        mask = ~np.isnat(columns["lease_expires_at"])
    return [str(t) for t in columns["thread_id"][mask]]


def overdue_marks(
    store: Store, before: datetime, now: datetime, limit: int | None = None
) -> list[tuple[str, datetime]]:
    """``(thread_id, due_at)`` of the ledger threads marked finished, due at or before
    ``before`` and holding no live lease at ``now``, the longest overdue first (the first
    ``limit`` of them, when given), in one read (never a thread at a time: a store the sweep
    never ran on has one per finished thread)."""
    if store.provider in SQL_PROVIDERS:
        import sqlalchemy as sa

        from durability.stores.sql.schema import threads, time_of

        t = threads.c
        query = sa.select(t.thread_id, t.due_at).where(*_overdue_sql(before, now))
        query = query.order_by(t.due_at, t.thread_id).limit(limit)
        with store.db.read("find overdue marks") as conn:  # type: ignore[attr-defined]
            return [(row[0], time_of(row[1])) for row in conn.execute(query)]  # type: ignore[misc]
    import numpy as np
    import pandas as pd

    ids, due = _overdue_columns(store, before, now)
    order = np.argsort(due, kind="stable")[:limit]
    return [(str(ids[i]), pd.Timestamp(due[i], tz=UTC).to_pydatetime()) for i in order]


def overdue_count(store: Store, before: datetime, now: datetime) -> int:
    """How many marks :func:`overdue_marks` would give, counted in the store."""
    if store.provider in SQL_PROVIDERS:
        import sqlalchemy as sa

        from durability.stores.sql.schema import threads

        # A walk of the ledger, not of the due index: SQLite keeps no statistics and would read
        # each due thread's row at random through the index (2.5 s of 1,000,000, 0.1 s walked).
        query = sa.select(sa.func.count()).select_from(threads)
        query = query.where(*_overdue_sql(before, now, walk=True))
        with store.db.read("count overdue marks") as conn:  # type: ignore[attr-defined]
            return int(conn.execute(query).scalar_one())
    return len(_overdue_columns(store, before, now)[0])


def _overdue_sql(before: datetime, now: datetime, *, walk: bool = False) -> list[Any]:
    """The ledger rows of :func:`overdue_marks`: due by ``before``, no lease live at ``now``
    (``walk``: compared as an expression, which no index serves)."""
    import sqlalchemy as sa

    from durability.stores.sql.schema import micros, threads

    t = threads.c
    due = t.due_at + 0 if walk else t.due_at
    return [
        due <= (micros(before) or 0),
        sa.or_(t.lease_holder.is_(None), t.lease_expires_at <= micros(now)),
    ]


def _overdue_columns(store: Store, before: datetime, now: datetime) -> tuple[Any, Any]:
    """The thread ids and due times of :func:`overdue_marks`, from the sweep's columns."""
    import numpy as np

    columns = store.scans.sweep_columns().columns
    due, expires = columns["due_at"], columns["lease_expires_at"]
    limit = np.datetime64(before.astimezone(UTC).replace(tzinfo=None), "us")
    at = np.datetime64(now.astimezone(UTC).replace(tzinfo=None), "us")
    mask = ~np.isnat(due) & (due <= limit) & (np.isnat(expires) | (expires <= at))
    return columns["thread_id"][mask], due[mask]


def holding(store: Store, thread_ids: list[str]) -> set[str]:
    """Which of these threads hold a checkpoint."""
    return {t for t in thread_ids if store.has_thread(t)}


def _sql_ledger_threads(store: Store, which: str) -> list[str]:
    import sqlalchemy as sa

    from durability.stores.sql.schema import checkpoints, threads

    t, c = threads.c, checkpoints.c
    clause = (
        ~sa.exists().where(c.tkey == t.tkey) if which == "empty" else t.lease_holder.isnot(None)
    )
    query = sa.select(t.thread_id).where(clause)
    if which == "empty" and store.provider == "sqlite":
        # In key order: each probe of the per-thread index lands next to the last (SQLite would
        # walk the ledger in row order and probe at random: 4.9 s of 1,000,000 threads, 0.8 s).
        query = query.order_by(t.tkey)
    elif which == "empty":
        # Postgres probes at random too (9.6 s); against the threads of one walk of the
        # per-thread index, hashed, 7.1 s.
        held = sa.select(c.tkey).group_by(c.tkey).subquery()
        query = (
            sa.select(t.thread_id)
            .select_from(threads.outerjoin(held, held.c.tkey == t.tkey))
            .where(held.c.tkey.is_(None))
        )
    with store.db.read("find ledger records to check") as conn:  # type: ignore[attr-defined]
        return [row[0] for row in conn.execute(query)]


# ---------------------------------------------------------------------------- memory


def _memory_orphan_writes(store: Store) -> dict[str, list[WriteKey]]:
    data: Any = getattr(store, "_data", None)
    if data is None:
        return {}
    found: dict[str, list[WriteKey]] = defaultdict(list)
    with data.lock:
        for (thread_id, ns, cid), bucket in data.writes.items():
            if (thread_id, ns, cid) not in data.ids:
                found[thread_id] += [(ns, cid, task, idx) for task, idx in bucket]
    return dict(found)


# ---------------------------------------------------------------------------- SQL


def _sql_orphan_writes(store: Store) -> dict[str, list[WriteKey]]:
    import sqlalchemy as sa

    from durability.stores.sql.schema import checkpoints, writes

    w = writes.c
    query = (
        sa.select(w.thread_id, w.namespace, w.checkpoint_id, w.task_id, w.idx)
        .where(~sa.exists().where(*_same_checkpoint(store, checkpoints, w)))
        .order_by(w.id)
    )
    found: dict[str, list[WriteKey]] = defaultdict(list)
    with store.db.read("find pending writes without their checkpoint") as conn:  # type: ignore[attr-defined]
        for thread_id, ns, cid, task, idx in conn.execute(query):
            found[thread_id].append((ns, cid, task, idx))
    return dict(found)


def _same_checkpoint(store: Store, table: Any, other: Any, checkpoint_id: Any = None) -> list[Any]:
    """The clauses naming the row of ``table`` that ``other`` (a row with a thread, namespace
    and checkpoint id) points at: its own checkpoint, or ``checkpoint_id`` (a parent) in its
    thread and namespace.

    Each probe must be one index search, never a walk through the thread's rows (a thread of
    10,000 checkpoints would make the check quadratic). SQLite's rebuilt table (migration 15)
    keeps one unique index of ``(thread_id, namespace, checkpoint_id)`` and no hash index, so
    there the ids are compared; Postgres keeps the ``(tkey, ckey)`` hashes (its btree cannot
    hold a 10 KB id), so there a parent's hash is computed in the query (a table without
    statistics yet is otherwise probed by its thread's hash alone, row by row).
    """
    from durability.stores.sql.schema import postgres_checkpoint_key

    t = table.c
    wanted = other.checkpoint_id if checkpoint_id is None else checkpoint_id
    if store.provider == "sqlite":
        return [
            t.thread_id == other.thread_id,
            t.namespace == other.namespace,
            t.checkpoint_id == wanted,
        ]
    key = (
        other.ckey
        if checkpoint_id is None
        else postgres_checkpoint_key(other.thread_id, other.namespace, wanted)
    )
    return [t.tkey == other.tkey, t.ckey == key]


def _sql_missing_parents(store: Store, thread_ids: list[str] | None) -> dict[str, list[Orphan]]:
    import sqlalchemy as sa

    from durability._util import chunks
    from durability.stores.sql.schema import checkpoints, thread_key

    row, parent, older = checkpoints, checkpoints.alias("parent"), checkpoints.alias("older")
    c = row.c
    query = (
        sa.select(c.thread_id, c.namespace, c.checkpoint_id, c.parent_checkpoint_id)
        .where(
            c.parent_checkpoint_id.isnot(None),
            c.parent_checkpoint_id != "",
            sa.or_(c.step_type.is_(None), c.step_type != STEP_FORK_ORIGIN),
            ~sa.exists().where(*_same_checkpoint(store, parent, c, c.parent_checkpoint_id)),
            sa.exists().where(
                older.c.tkey == c.tkey, older.c.namespace == c.namespace, older.c.seq < c.seq
            ),
        )
        .order_by(c.seq)
    )
    # The threads asked for, 500 at a time, each by its key (the per-thread index).
    among = (
        [[]]
        if thread_ids is None
        else [
            [c.tkey.in_([thread_key(t) for t in chunk]), c.thread_id.in_(chunk)]
            for chunk in chunks(thread_ids)
        ]
    )
    found: dict[str, list[Orphan]] = defaultdict(list)
    with store.db.read("find checkpoints whose parent is missing") as conn:  # type: ignore[attr-defined]
        for clauses in among:
            for thread_id, ns, cid, parent_id in conn.execute(query.where(*clauses)):
                found[thread_id].append((ns, cid, parent_id))
    return dict(found)


# ---------------------------------------------------------------------------- Redis


def redis_tags(store: Store, suffix: str) -> Iterator[str]:
    """The tags of the Redis store's threads that hold a key ending in ``:suffix``."""
    for key in store.scan_keys(":" + suffix):  # type: ignore[attr-defined]
        tag = key.decode().rpartition("}:")[0].rpartition("{")[2]
        if tag != "g":
            yield tag


def _redis_orphan_writes(store: Store) -> dict[str, list[WriteKey]]:
    r: Any = store
    found: dict[str, list[WriteKey]] = {}
    tags = sorted(set(redis_tags(store, "w")))
    for tag in tags:
        base = f"{r.prefix}{{{tag}}}:"
        pipe = r.client.pipeline(transaction=False)
        pipe.hget(base + "m", "id")
        pipe.hkeys(base + "w")
        pipe.hkeys(base + "i")
        raw_id, fields, ids = pipe.execute()
        held = {i.decode() for i in ids}
        orphans = []
        for field in fields:
            ns, cid, task, idx = field.decode().split("\0")
            if f"{ns}\0{cid}" not in held:
                orphans.append((ns, cid, task, int(idx)))
        if orphans:
            found[raw_id.decode() if raw_id else tag] = orphans
    return found
