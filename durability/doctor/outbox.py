"""The doctor's reads and repairs of replication state: outbox records whose row is gone, and
rows marked synced that the plane lacks, on the SQL and Redis stores (the providers that keep
an outbox).

Each repair re-checks, in the statement or script that acts, what the doctor found: a SQL
statement carries the condition in its ``WHERE``; a Redis script runs over one thread's keys
(one slot, atomic) and checks each record before it moves or drops it, then the cross-slot
outbox index is brought in line (the thread's keys are the truth; a crash between the two
leaves an index entry the next reader or reconcile repairs). A drain, a put or a delete racing
a repair therefore finds each record either as it was or as the repair left it, never half.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability._util import chunks
from durability.doctor.reads import SQL_PROVIDERS, redis_tags

if TYPE_CHECKING:
    from durability.stores.base import Store

#: An outbox record: the Redis thread's tag (``None`` on SQL, where a record names only a seq)
#: and the row's seq.
OutboxKey = tuple[str | None, int]


def orphan_outbox(
    store: Store, sample: int | None = None, samples: dict[str, Any] | None = None
) -> dict[str | None, list[OutboxKey]]:
    """Outbox records whose row is gone: per Redis thread, its state records (of a synced row,
    or of a pending row's document) left without it; on SQL, under ``None``, the outbox and
    synced records whose checkpoint is gone.

    ``sample`` (SQL): of more synced records than that (one per checkpoint the plane took, each
    checked by the checkpoint's key: a read of the whole table on SQLite), only about
    ``sample`` picked at random are checked, and ``samples`` gets ``(read, of, "synced
    records")`` under ``outbox_without_checkpoint``; the outbox's own rows are all checked.

    A Redis pending row's document (``od``) carries the row itself and outlives the thread's
    other keys on purpose (a replicating store sends it even after the thread expired); only
    state records left without their row are reported.
    """
    if store.provider in SQL_PROVIDERS:
        seqs = _sql_orphan_outbox(store, sample, {} if samples is None else samples)
        return {None: [(None, seq) for seq in seqs]} if seqs else {}
    if store.provider != "redis":
        return {}
    r: Any = store
    found: dict[str | None, list[OutboxKey]] = {}
    for tag in sorted(set(redis_tags(store, "sy")) | set(redis_tags(store, "os"))):
        base = f"{r.prefix}{{{tag}}}:"
        pipe = r.client.pipeline(transaction=False)
        pipe.hget(base + "m", "id")
        for suffix in ("c", "sy", "od", "os"):
            pipe.hkeys(base + suffix)
        raw_id, held, synced, docs, states = pipe.execute()
        rows = {int(s) for s in held}
        pending = {int(s) for s in docs}
        stale = sorted(
            {int(f[1:]) for f in synced if f[:1] == b"h" and int(f[1:]) not in rows}
            | {int(f[1:]) for f in states if f[:1] == b"h" and int(f[1:]) not in pending}
        )
        if stale:
            found[raw_id.decode() if raw_id else tag] = [(tag, seq) for seq in stale]
    return found


def drop_orphan_outbox(store: Store, keys: Iterable[OutboxKey]) -> int:
    """Drop the outbox records of these keys whose row is still gone (checked where they are
    dropped); how many records went."""
    if store.provider == "redis":
        return _redis_drop_orphan_outbox(store, keys)
    return _sql_drop_orphan_outbox(store, sorted({seq for _tag, seq in keys}))


def requeue(store: Store, rows: dict[str, list[int]], now: datetime) -> int:
    """Put rows marked synced back in the outbox, pending from ``now`` (the plane lacks them):
    per thread, the seqs. A row no longer held or no longer marked synced is left alone; how
    many rows were re-queued. The next connected drain sends them again."""
    if store.provider == "redis":
        return _redis_requeue(store, rows, now)
    return _sql_requeue(store, sorted({seq for seqs in rows.values() for seq in seqs}), now)


# ---------------------------------------------------------------------------- SQL


def _sql_orphan_outbox(store: Store, sample: int | None, samples: dict[str, Any]) -> list[int]:
    import sqlalchemy as sa

    from durability.stores.sql.schema import checkpoints, outbox_table, synced_table

    found: set[int] = set()
    with store.db.read("find outbox records without their checkpoint") as conn:  # type: ignore[attr-defined]
        for table in (outbox_table, synced_table):
            query = sa.select(table.c.seq).where(
                ~sa.exists().where(checkpoints.c.seq == table.c.seq)
            )
            picked = _picked_synced(conn, sample) if table is synced_table else None
            if picked is None:
                found.update(int(seq) for (seq,) in conn.execute(query))
                continue
            samples["outbox_without_checkpoint"] = (len(picked[0]), picked[1], "synced records")
            for chunk in chunks(picked[0]):
                found.update(int(s) for (s,) in conn.execute(query.where(table.c.seq.in_(chunk))))
    return sorted(found)


def _picked_synced(conn: Any, sample: int | None) -> tuple[list[int], int] | None:
    """About ``sample`` synced records picked at random (each the first at or after a random
    point of the seq range: one key search) and how many there are; ``None``: read them all
    (no sample asked, or no more records than it)."""
    import random

    import sqlalchemy as sa

    from durability.stores.sql.schema import synced_table

    s = synced_table.c
    total, low, high = conn.execute(
        sa.select(sa.func.count(), sa.func.min(s.seq), sa.func.max(s.seq))
    ).one()
    if sample is None or total <= sample:
        return None
    rng = random.Random(0)
    points = sorted(rng.randint(low, high) for _ in range(sample))
    picked: set[int] = set()
    for chunk in chunks(points):
        firsts = [sa.select(sa.func.min(s.seq)).where(s.seq >= p).scalar_subquery() for p in chunk]
        picked.update(int(seq) for seq in conn.execute(sa.select(*firsts)).one() if seq is not None)
    return sorted(picked), int(total)


def _sql_drop_orphan_outbox(store: Store, seqs: list[int]) -> int:
    import sqlalchemy as sa

    from durability.stores.sql.schema import checkpoints, outbox_table, synced_table

    dropped = 0
    with store.db.write("drop outbox records without their checkpoint") as conn:  # type: ignore[attr-defined]
        for table in (outbox_table, synced_table):
            for chunk in chunks(seqs):
                gone = ~sa.exists().where(checkpoints.c.seq == table.c.seq)
                result = conn.execute(table.delete().where(table.c.seq.in_(chunk), gone))
                dropped += int(result.rowcount)
    return dropped


def _sql_requeue(store: Store, seqs: list[int], now: datetime) -> int:
    """The synced records move to outbox records in one transaction."""
    import sqlalchemy as sa

    from durability.stores.sql.schema import checkpoints, micros, outbox_table, synced_table

    c, at, moved = checkpoints.c, micros(now), 0
    with store.db.write("re-queue rows the plane lacks") as conn:  # type: ignore[attr-defined]
        for chunk in chunks(seqs):
            marked = sa.select(synced_table.c.seq).where(synced_table.c.seq.in_(chunk))
            rows = sa.select(c.seq, c.project_id, sa.literal(0), sa.literal(at)).where(
                c.seq.in_(marked)
            )
            columns = ["seq", "project_id", "attempts", "pending_since"]
            conn.execute(outbox_table.insert().from_select(columns, rows))
            gone = conn.execute(synced_table.delete().where(synced_table.c.seq.in_(chunk)))
            moved += int(gone.rowcount)  # the records moved (an INSERT … SELECT counts none)
    return moved


# ---------------------------------------------------------------------------- Redis


def _redis_drop_orphan_outbox(store: Any, keys: Iterable[OutboxKey]) -> int:
    """One script per thread (``outbox_drop_stale``), then the dropped pending records' index
    entries are forgotten (and whatever a racer indexed meanwhile is re-derived)."""
    from durability.stores.redis.keys import IndexOps, member

    by_tag: dict[str, list[int]] = defaultdict(list)
    for tag, seq in keys:
        assert tag is not None
        by_tag[tag].append(seq)
    calls = [(tag, sorted(set(seqs))) for tag, seqs in sorted(by_tag.items())]
    dropped, unindex = 0, IndexOps()
    for chunk in chunks(calls):
        out = store.eval_many("drop outbox records without their row", "outbox_drop_stale", chunk)
        for (tag, _seqs), (count, *gone) in zip(chunk, out, strict=True):
            dropped += int(count)
            for seq in gone:
                unindex.outbox[member(tag, int(seq))] = 0
                unindex.quarantine[member(tag, int(seq))] = 0
    if not unindex.empty:
        store.forget(unindex, {tag for tag, _seqs in calls})
    return dropped


def _redis_requeue(store: Any, rows: dict[str, list[int]], now: datetime) -> int:
    """One script per thread (``outbox_requeue``), then the re-queued rows are indexed in the
    outbox at their write time (the drain sends oldest first)."""
    from durability.clock import to_micros
    from durability.stores.redis import documents as docs
    from durability.stores.redis.keys import IndexOps, member, thread_tag

    at = to_micros(now)
    calls = [
        (thread_tag(thread_id), [at, *sorted(set(seqs))])
        for thread_id, seqs in sorted(rows.items())
    ]
    add = IndexOps()
    for chunk in chunks(calls):
        out = store.eval_many("re-queue rows the plane lacks", "outbox_requeue", chunk)
        for (tag, _args), flat in zip(chunk, out, strict=True):
            for j in range(0, len(flat), 2):
                add.outbox[member(tag, int(flat[j]))] = docs.header_time(flat[j + 1])
    store.index("index re-queued rows", add=add)
    return len(add.outbox)
