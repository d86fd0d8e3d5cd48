"""Checks on what a provider keeps beside the threads: the Redis store's cross-slot indexes,
and a LangGraph store's own invariants (writes and channel blobs no checkpoint references)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from durability.doctor.model import Check, Context, named

Finding = tuple[str | None, list[Any], str]

#: The Redis store's cross-slot indexes, in :attr:`GlobalKeys.indexes` order.
REDIS_INDEXES = ("threads", "finished", "parks", "outbox", "quarantine")


def redis_index_diff(store: Any) -> dict[str, tuple[list[str], list[str]]]:
    """Per Redis index, the entries its threads' keys support that it lacks (or scores
    differently) and the entries it holds that no thread supports."""
    from durability._util import chunks
    from durability.doctor.reads import redis_tags
    from durability.stores.redis.keys import IndexOps
    from durability.stores.redis.reconcile import index_state

    tags = sorted(set(redis_tags(store, "m")) | set(redis_tags(store, "os")))
    supported = IndexOps()
    for chunk in chunks(tags):
        for state in index_state(store, chunk):
            state.entries(supported)
    found: dict[str, tuple[list[str], list[str]]] = {}
    for name, key, want in zip(REDIS_INDEXES, store.keys.indexes, supported.indexes(), strict=True):
        have = {m.decode(): score for m, score in store.client.zscan_iter(key, count=1000)}
        lacking = sorted(m for m, score in want.items() if have.get(m) != score)
        extra = sorted(set(have) - set(want))
        if lacking or extra:
            found[name] = (lacking, extra)
    return found


def _redis_index(ctx: Context) -> Iterator[Finding]:
    for name, (lacking, extra) in redis_index_diff(ctx.store).items():
        yield (
            None,
            [*lacking, *extra],
            f"the {name!r} index lacks {len(lacking)} entries its threads' keys support"
            + (f" ({named(lacking)})" if lacking else "")
            + f" and holds {len(extra)} that no thread supports"
            + (f" ({named(extra)})" if extra else ""),
        )


def langgraph_orphans(store: Any) -> dict[str, list[tuple[str, ...]]]:
    """Per thread of a LangGraph store, its writes ``("write", ns, checkpoint id, task id,
    idx)`` and (Postgres) channel blobs ``("blob", ns, channel, version)`` that no checkpoint
    references."""
    import sqlalchemy as sa

    cp = store.table("checkpoints")
    writes = store.table("writes" if store.dialect == "sqlite" else "checkpoint_writes")
    queries = {
        "write": f"SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx FROM "  # noqa: S608 - quoted identifiers
        f"{writes} w WHERE NOT EXISTS (SELECT 1 FROM {cp} c WHERE c.thread_id = w.thread_id AND "
        "c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)",
    }
    if store.dialect == "postgres":
        queries["blob"] = (
            "SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version FROM "  # noqa: S608
            f"{store.table('checkpoint_blobs')} b WHERE NOT EXISTS (SELECT 1 FROM {cp} c WHERE "
            "c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns AND "
            "c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"
        )
    found: dict[str, list[tuple[str, ...]]] = {}
    with store.read("find LangGraph rows no checkpoint references") as conn:
        for what, sql in queries.items():
            for thread_id, *rest in conn.execute(sa.text(sql)):
                found.setdefault(str(thread_id), []).append((what, *map(str, rest)))
    return found


def _langgraph(ctx: Context) -> Iterator[Finding]:
    for thread_id, rows in sorted(langgraph_orphans(ctx.store).items()):
        counts = {what: sum(r[0] == what for r in rows) for what in ("write", "blob")}
        parts = [f"{n} {what}s" for what, n in counts.items() if n]
        yield (
            thread_id,
            rows,
            f"{' and '.join(parts)} that no checkpoint of the thread references (LangGraph "
            "leaves them behind; nothing reads them)",
        )


REDIS_INDEX = Check(
    "redis_index_mismatch",
    "warning",
    "a Redis cross-slot index (threads, finished, parks, outbox, quarantine) that disagrees "
    "with the threads' own keys",
    _redis_index,
    fix="durability doctor {url} --fix",
    repair="rebuild_redis_indexes",
    applies=lambda ctx: ctx.store.provider == "redis",
    unless="not a Redis store",
)

LANGGRAPH_ORPHANS = Check(
    "langgraph_unreferenced",
    "warning",
    "LangGraph pending writes, or channel blobs (Postgres), that no checkpoint references",
    _langgraph,
    applies=lambda ctx: getattr(ctx.store, "source", "") == "langgraph",
    unless="not a LangGraph store",
)

CHECKS = (REDIS_INDEX, LANGGRAPH_ORPHANS)
