"""The Redis store's tombstones: an ``E`` hash in each erased thread's own slot.

The put, park and pending-write scripts check ``E`` in the same atomic step as their write, so
no write lands on an erased thread. ``E`` never expires (the thread's other keys do); the
store-wide ``tombstones`` index (tag → erase time) counts and lists them, written after the
thread's script like every cross-slot index. The key's name carries the thread's tag, as every
key of every thread does (an unkeyed hash of the id that addresses the slot); the tombstone's
content is the keyed hash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from durability.clock import from_micros, to_micros
from durability.model import Tombstone
from durability.stores.redis.keys import thread_tag
from durability.stores.tombstones import EraseRequest, Tombstones, new_secret

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore


class RedisTombstones(Tombstones):
    """Tombstones in the erased threads' slots, counted in one store-wide index."""

    store: RedisStore

    def _load_secret(self) -> str:
        key, fresh = self.store.keys.erasure_secret, new_secret()

        def call(_retry: bool) -> Any:
            self.store.client.set(key, fresh, nx=True)
            return self.store.client.get(key)

        found = self.store.run("read the erasure secret", call)
        return str(found.decode())

    def _get(self, thread_id: str, digest: str) -> Tombstone | None:
        raw = self.store.eval(
            "read a tombstone", "tombstone_read", thread_tag(thread_id), [], write=False
        )
        return _stone(raw)

    def _bury(self, thread_id: str, stone: Tombstone) -> Tombstone:
        tag = thread_tag(thread_id)
        args = [stone.hash, str(to_micros(stone.erased_at)), stone.erased_by, stone.receipt]
        raw = self.store.eval("tombstone a thread", "tombstone_bury", tag, args, write=False)
        stored = _stone(raw)
        assert stored is not None
        self.index_tombstone(tag, stored)
        return stored

    def index_tombstone(self, tag: str, stone: Tombstone) -> None:
        """Add the thread's tombstone to the store-wide index (idempotent)."""
        key = self.store.keys.tombstones
        score = to_micros(stone.erased_at)
        self.store.run("index a tombstone", lambda _r: self.store.client.zadd(key, {tag: score}))

    def _lift(self, thread_id: str, digest: str) -> bool:
        tag = thread_tag(thread_id)
        gone = self.store.eval("reopen a thread", "tombstone_lift", tag, [], write=False)
        key = self.store.keys.tombstones
        self.store.run("unindex a tombstone", lambda _r: self.store.client.zrem(key, tag))
        return bool(gone)

    def _record_receipt(self, thread_id: str, digest: str, receipt: str) -> None:
        tag = thread_tag(thread_id)
        self.store.eval(
            "record an erasure receipt", "tombstone_receipt", tag, [receipt], write=False
        )

    # Erase requests: one hash in the store-wide slot, field "tombstone NUL project" -> JSON.

    def _put_request(self, request: EraseRequest) -> EraseRequest:
        key, field = self.store.keys.erase_requests, _field(request)

        def call(_retry: bool) -> Any:
            self.store.client.hsetnx(key, field, _encode(request))
            return self.store.client.hget(key, field)

        return _decode(field, self.store.run("queue an erase request", call))

    def _requests(self) -> list[EraseRequest]:
        key = self.store.keys.erase_requests
        found = self.store.run("list erase requests", lambda _r: self.store.client.hgetall(key))
        return [_decode(f.decode(), v) for f, v in found.items()]

    def _update_request(self, request: EraseRequest) -> None:
        key, field = self.store.keys.erase_requests, _field(request)

        def call(_retry: bool) -> None:
            if self.store.client.hexists(key, field):
                self.store.client.hset(key, field, _encode(request))

        self.store.run("record an erase attempt", call)

    def _drop_request(self, digest: str, project_id: str) -> None:
        key, field = self.store.keys.erase_requests, f"{digest}\0{project_id}"
        self.store.run("drop an erase request", lambda _r: self.store.client.hdel(key, field))

    def _count(self) -> int:
        key = self.store.keys.tombstones
        return int(self.store.run("count tombstones", lambda _r: self.store.client.zcard(key)))

    def _all(self) -> list[Tombstone]:
        key = self.store.keys.tombstones
        tags = self.store.run("list tombstones", lambda _r: self.store.client.zrange(key, 0, -1))
        calls: list[tuple[str, list[Any]]] = [(t.decode(), []) for t in tags]
        if not calls:
            return []
        raw = self.store.eval_many("list tombstones", "tombstone_read", calls, write=False)
        return [stone for stone in map(_stone, raw) if stone is not None]


def _stone(raw: list[Any]) -> Tombstone | None:
    digest, at, by, receipt = raw
    if digest is None:
        return None
    return Tombstone(
        hash=digest.decode(),
        erased_at=from_micros(int(at)),
        erased_by=(by or b"").decode(),
        receipt=(receipt or b"").decode(),
    )


def _field(request: EraseRequest) -> str:
    return f"{request.tombstone}\0{request.project_id}"


def _encode(request: EraseRequest) -> bytes:
    return orjson.dumps(
        {
            "thread_id": request.thread_id,
            "requested_at": to_micros(request.requested_at),
            "attempts": request.attempts,
            "last_error": request.last_error,
        }
    )


def _decode(field: str, raw: bytes) -> EraseRequest:
    digest, _, project_id = field.partition("\0")
    data = orjson.loads(raw)
    return EraseRequest(
        thread_id=data["thread_id"],
        tombstone=digest,
        project_id=project_id,
        requested_at=from_micros(data["requested_at"]),
        attempts=data["attempts"],
        last_error=data["last_error"],
    )
