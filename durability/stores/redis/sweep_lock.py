"""The Redis store's sweep lock: ``SET NX PX`` on the store's lock key, refreshed while the
sweep runs, released by compare-and-delete (a crashed holder's expires)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from durability.stores.sweep_lock import LOCK_TTL, Holder, SweepLock

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore

#: Redis: refresh the expiry only while the value is still ours.
_REFRESH = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
#: Redis: delete only our own lock.
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


class RedisSweepLock(SweepLock):
    """``SET NX PX`` on the store's sweep-lock key, refreshed, released by compare-and-delete."""

    store: RedisStore

    def __init__(self, store: RedisStore) -> None:
        super().__init__(store)
        self.key = store.keys.sweep_lock
        self.value = self.holder.to_json()
        self.ttl_ms = int(LOCK_TTL * 1000)

    def _run(self, action: str, call: Any) -> Any:
        return self.store.run(action, lambda _retry: call(self.store.client))

    def _take(self) -> Holder | None:
        if self._run(
            "take the sweep lock", lambda r: r.set(self.key, self.value, nx=True, px=self.ttl_ms)
        ):
            return None
        current = self._run("read the sweep lock", lambda r: r.get(self.key))
        return Holder.from_json(current) or Holder("an unknown host", 0, time.time(), "")

    def _refresh(self) -> None:
        self._run(
            "refresh the sweep lock",
            lambda r: r.eval(_REFRESH, 1, self.key, self.value, self.ttl_ms),
        )

    def release(self) -> None:
        self._run("release the sweep lock", lambda r: r.eval(_RELEASE, 1, self.key, self.value))
