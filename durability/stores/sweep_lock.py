"""One sweep per store at a time: a lock each provider keeps in the store itself.

:func:`sweep_lock` gives the :class:`SweepLock` of a store; :meth:`SweepLock.held` holds it
around a sweep, and a second sweep of the same store, from any process or host, is refused with
:class:`~durability.errors.SweepLocked` naming the holder (host, pid) and since when. Every kind
is released when its holder crashes:

* Postgres: a session-level advisory lock on a dedicated connection (the server releases it when
  the session ends); the holder is described in a ``durability_sweep_lock`` row.
* SQLite: that row is the lock, with an expiry the holder refreshes while it sweeps; a row whose
  expiry has passed, or whose holder process is gone from this host, is taken over.
* Redis: ``SET NX`` with an expiry, refreshed while the sweep runs, released by compare-and-delete.
* memory (and a store of one's own, by default): a lock in this process.

The backends' locks live in their packages (``stores/sql/sweep_lock.py``,
``stores/redis/sweep_lock.py``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

import orjson

from durability.errors import StoreError, SweepLocked

if TYPE_CHECKING:
    from durability.stores.base import Store

#: Seconds a SQLite or Redis lock lives without a refresh (a crashed holder's, at most).
LOCK_TTL = 60.0
#: Seconds between refreshes while a sweep runs.
REFRESH_EVERY = LOCK_TTL / 3


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a store's sweep lock: a host, a process, since when, and a token of its own."""

    host: str
    pid: int
    since: float
    token: str

    @classmethod
    def me(cls) -> Holder:
        return cls(socket.gethostname(), os.getpid(), time.time(), uuid.uuid4().hex)

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")
        return f"process {self.pid} on host {self.host!r} since {since}"

    def gone(self) -> bool:
        """Whether this holder is a process of this host that no longer exists."""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> Holder | None:
        if not raw:
            return None
        try:
            data = orjson.loads(raw)
            return cls(
                str(data["host"]), int(data["pid"]), float(data["since"]), str(data["token"])
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


class SweepLock(ABC):
    """The sweep lock of one store. Use :meth:`held` around a sweep."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.holder = Holder.me()

    @contextmanager
    def held(self) -> Iterator[Holder]:
        """Hold the lock for the block; refreshed in the background where it expires.

        Raises:
            SweepLocked: Another sweep holds it (the message names it and since when).
        """
        self.acquire()
        stop = threading.Event()
        refresher = threading.Thread(
            target=self._refresh_until, args=(stop,), name="durability-sweep-lock", daemon=True
        )
        refresher.start()
        try:
            yield self.holder
        finally:
            stop.set()
            refresher.join()
            self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`SweepLocked` naming its holder."""
        current = self._take()
        if current is not None:
            raise SweepLocked(
                f"cannot sweep {self.store!r}: another sweep of this store has been running in "
                f"{current.describe()}; wait for it to finish (one sweep per store at a time), "
                "or, if that process is gone, sweep again once its lock expires"
            )

    def _refresh_until(self, stop: threading.Event) -> None:
        while not stop.wait(REFRESH_EVERY):
            try:
                self._refresh()
            except StoreError:  # the next refresh tries again; expiry is LOCK_TTL away
                continue

    @abstractmethod
    def _take(self) -> Holder | None:
        """Take the lock: ``None`` on success, else the current holder."""

    def _refresh(self) -> None:  # noqa: B027 - a lock that cannot expire needs none
        """Push the lock's expiry on (while the sweep runs)."""

    @abstractmethod
    def release(self) -> None:
        """Let go of the lock (only this holder's)."""


class MemorySweepLock(SweepLock):
    """A lock in this process, per memory store (the store lives in the process)."""

    _holders: ClassVar[dict[str, Holder]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @property
    def _name(self) -> str:
        # Handles on one named memory store share its data: lock the data, not the handle.
        return f"{type(self.store).__name__}@{id(getattr(self.store, '_data', self.store))}"

    def _take(self) -> Holder | None:
        with MemorySweepLock._guard:
            current = MemorySweepLock._holders.setdefault(self._name, self.holder)
        return None if current == self.holder else current

    def release(self) -> None:
        with MemorySweepLock._guard:
            if MemorySweepLock._holders.get(self._name) == self.holder:
                del MemorySweepLock._holders[self._name]


__all__ = ["LOCK_TTL", "REFRESH_EVERY", "Holder", "MemorySweepLock", "SweepLock"]
