"""Keeping the Redis store's cross-slot indexes true to the threads' own keys.

The thread's keys are the truth; the indexes in the ``{g}`` slot are repaired:

* every reader skips an entry its thread does not support, removes it, then re-derives the
  thread's entries from its keys (remove, then repair: a writer racing the removal is re-added);
* on start (:func:`reconcile`, once per opened store, one process at a time) the store scans
  its own keys and re-derives every thread's entries, then drops unsupported ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from durability._util import chunks
from durability.stores.redis.keys import IndexOps, ThreadIndex, member_tag

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore

#: How long one process holds the reconcile lock at most.
LOCK_MS = 120_000


def reconcile(store: RedisStore) -> int:
    """Repair the cross-slot indexes from the threads' own keys; returns the threads seen."""
    token = uuid.uuid4().hex
    action = "reconcile the indexes"
    lock = store.keys.reconcile
    taken = store.run(action, lambda _r: store.client.set(lock, token, nx=True, px=LOCK_MS))
    if not taken:
        return 0
    try:
        tags: set[str] = set()

        def scan(_retry: bool) -> None:
            for key in store.scan_keys(":*"):
                tag, _, suffix = key.decode().rpartition("}:")
                if suffix in ("m", "os"):
                    tags.add(tag.rpartition("{")[2])

        store.run(action, scan)
        tags.discard("g")
        for chunk in chunks(sorted(tags)):
            repair(store, chunk)
        _drop_unsupported(store)
        return len(tags)
    finally:
        store.run(action, lambda _r: store.script("release_lock")(keys=[lock], args=[token]))


def index_state(store: RedisStore, tags: Sequence[str]) -> list[ThreadIndex]:
    """What each thread's own keys say its index entries should be."""
    states = store.eval_many(
        "read a thread's index state", "index_state", [(t, []) for t in tags], write=False
    )
    return [ThreadIndex.parse(tag, raw) for tag, raw in zip(tags, states, strict=True)]


def repair(store: RedisStore, tags: Sequence[str]) -> None:
    """Add every index entry the threads' keys support (never removes)."""
    if not tags:
        return
    add = IndexOps()
    for state in index_state(store, sorted(set(tags))):
        state.entries(add)
    store.index("repair the indexes", add=add)


def forget(store: RedisStore, remove: IndexOps, tags: Iterable[str]) -> None:
    """Drop index entries their threads do not support, then re-add what a racer wrote."""
    store.index("clean the indexes", remove=remove)
    repair(store, list(tags))


def _drop_unsupported(store: RedisStore) -> None:
    keys = store.keys.indexes
    members: dict[str, list[tuple[bytes, float]]] = {}

    def scan(_retry: bool) -> None:
        for key in keys:
            members[key] = list(store.client.zscan_iter(key, count=1000))

    store.run("reconcile the indexes", scan)
    tags = sorted({member_tag(m) for entries in members.values() for m, _ in entries})
    supported = IndexOps()
    for chunk in chunks(tags):
        for state in index_state(store, chunk):
            state.entries(supported)
    remove = IndexOps()
    for key, have, target in zip(keys, supported.indexes(), remove.indexes(), strict=True):
        for name, _score in members[key]:
            if name.decode() not in have:
                target[name.decode()] = 0
    if not remove.empty:
        forget(store, remove, {member_tag(m) for m in remove.members()})
