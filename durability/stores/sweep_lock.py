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
* memory: a lock in this process (the store lives in it).
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
from typing import Any, ClassVar

import orjson

from durability.errors import StoreError, SweepLocked
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


class SQLSweepLock(SweepLock):
    """A ``durability_sweep_lock`` row in the store (SQLite: the lock itself, with an expiry;
    Postgres: the holder's description, the lock being a session advisory lock)."""

    TABLE = "durability_sweep_lock"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.engine: Any = store._engine  # type: ignore[attr-defined]
        self.postgres = store.provider == "postgres"
        self._session: Any = None
        self._key = 0
        self._made: Any = None

    def _table(self) -> Any:
        """The lock table (created on first use: the store's migrations know nothing of it)."""
        import sqlalchemy as sa

        if self._made is not None:
            return self._made
        table = sa.Table(
            self.TABLE,
            sa.MetaData(),
            sa.Column("name", sa.String(32), primary_key=True),
            sa.Column("holder", sa.Text, nullable=False),
            sa.Column("expires_at", sa.Float, nullable=False),
        )
        with self.engine.connect() as conn:
            table.create(conn, checkfirst=True)
        self._made = table
        return table

    def _take(self) -> Holder | None:
        from durability.stores.sql import thread_key

        table = self._table()
        with self.store._errors("take the sweep lock"):  # type: ignore[attr-defined]
            if self.postgres:
                schema = getattr(self.store, "options", None)
                name = f"durability-sweep-lock:{getattr(schema, 'schema', None) or ''}"
                key = int(thread_key(name)[:15], 16)  # one lock per schema of the database
                session = self.engine.connect()
                if not session.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (key,)).scalar():
                    session.close()
                    return self._current(table) or Holder("an unknown host", 0, time.time(), "")
                self._session, self._key = session, key
                self._write(table, None)
                return None
            return self._claim(table)

    def _claim(self, table: Any) -> Holder | None:
        with self.store._write("take the sweep lock") as conn:  # type: ignore[attr-defined]
            row = conn.execute(table.select().where(table.c.name == "sweep")).first()
            current = None if row is None else Holder.from_json(row.holder)
            if current is not None and row.expires_at > time.time() and not current.gone():
                return current
            self._write(table, conn)
        return None

    def _write(self, table: Any, conn: Any) -> None:
        values = {"holder": self.holder.to_json().decode(), "expires_at": time.time() + LOCK_TTL}
        if conn is None:
            with self.engine.connect() as own:
                self._write(table, own)
            return
        conn.execute(table.delete().where(table.c.name == "sweep"))
        conn.execute(table.insert().values(name="sweep", **values))

    def _current(self, table: Any) -> Holder | None:
        with self.engine.connect() as conn:
            row = conn.execute(table.select().where(table.c.name == "sweep")).first()
        return None if row is None else Holder.from_json(row.holder)

    def _refresh(self) -> None:
        if self.postgres:
            return  # the session holds the advisory lock for as long as it lives
        table = self._table()
        with self.store._errors("refresh the sweep lock"), self.engine.connect() as conn:  # type: ignore[attr-defined]
            conn.execute(
                table.update()
                .where(table.c.name == "sweep", table.c.holder == self.holder.to_json().decode())
                .values(expires_at=time.time() + LOCK_TTL)
            )

    def release(self) -> None:
        table = self._table()
        mine = self.holder.to_json().decode()
        with self.engine.connect() as conn:
            conn.execute(table.delete().where(table.c.name == "sweep", table.c.holder == mine))
        if self._session is not None:
            session, self._session = self._session, None
            try:
                session.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (self._key,))
            finally:
                session.close()


#: Redis: refresh the expiry only while the value is still ours.
_REFRESH = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
#: Redis: delete only our own lock.
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


class RedisSweepLock(SweepLock):
    """``SET NX PX`` on the store's sweep-lock key, refreshed, released by compare-and-delete."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.key = f"{store.prefix}{{g}}:sweep-lock"  # type: ignore[attr-defined]
        self.value = self.holder.to_json()
        self.ttl_ms = int(LOCK_TTL * 1000)

    def _run(self, action: str, call: Any) -> Any:
        return self.store._run(action, lambda _retry: call(self.store._client))  # type: ignore[attr-defined]

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


def sweep_lock(store: Store) -> SweepLock:
    """The sweep lock of ``store``'s provider (a custom store gets a lock in this process)."""
    kinds: dict[str, type[SweepLock]] = {
        "sqlite": SQLSweepLock,
        "postgres": SQLSweepLock,
        "redis": RedisSweepLock,
    }
    return kinds.get(store.provider, MemorySweepLock)(store)


__all__ = ["LOCK_TTL", "Holder", "SweepLock", "sweep_lock"]
