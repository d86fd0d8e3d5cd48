"""Connections: a store and a project bound to a plane, and the one drain thread per database.

:func:`connect` checks the key with the plane (``GET /public/v1/auth/check``), learns the caps it
announces, records the connection in the store (so other processes, a CLI sweep say, know the
store replicates; never the key), and starts draining. A disconnect marks the record closed but
keeps it: the store still replicates until an operator runs ``durability outbox forget``.
Several connections per process are fine, one per (store database, project): each drains only
its project's rows. Rows of a project nobody connected stay buffered, and ``durability outbox
status`` shows them as such. Not connected, strictly nothing is sent.

All connections on one store database share one :class:`~durability.replication.outbox.DrainWorker`
thread, woken by the store's write listener. A write never waits for it. :meth:`Connection.close`
(and :func:`disconnect`) drains synchronously, up to a timeout, before the connection lets go of
its key.

A store without outbox operations (a custom store) gives a connection that does nothing: it
never sends and never fails.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx

from durability._util import redact_url
from durability.errors import ReplicationError
from durability.replication.client import IngestAnswer, PlaneClient, normalize_target
from durability.replication.outbox import DrainReport, PlaneLimits, drain_once, supports_outbox
from durability.replication.wire import CLEAR, ROW_KEY, PayloadEncoder
from durability.replication.worker import Backoff, DrainWorker
from durability.stores.base import Store

logger = logging.getLogger("durability.replication")

#: Default batch caps: rows per ingest request, and the stored bytes of those rows.
BATCH_ROWS = 500
BATCH_BYTES = 4 * 1024 * 1024
#: Ingest requests one drain pass keeps in flight at most (decision 0155).
IN_FLIGHT = 2
#: Seconds between two heartbeats a drain writes into its connection record (one small write).
HEARTBEAT_EVERY = 15.0


def database_key(store: Store) -> str:
    """What identifies a store's database within this process (one drain thread per value)."""
    schema = getattr(getattr(store, "options", None), "schema", None)
    return f"{store.provider}|{store.url}|{schema or ''}"


class Connection:
    """A store and a project replicating to a plane. Make one with :func:`connect`.

    Args:
        store: The store whose outbox to drain.
        target: The plane's URL (``https://…``).
        api_key: The plane's API key (kept private: never in a repr, log or message).
        project_id: The local project whose rows this connection sends (rows are stamped
            with ``Checkpoint.project_id``; default ``""``).
        http: An ``httpx.Client`` to send through (tests inject one).
        encoder: How ``state`` is sent (the BYOK seam; default clear).
        limits: Caps to check before sending; default: what the plane announces at connect.
        batch_rows: Rows in one ingest request, at most (default 500).
        batch_bytes: Bytes of one ingest request, at most (default 4 MiB).
        in_flight: Ingest requests a pass keeps in flight at once (default 2; 1 sends one
            batch at a time). Batches in flight never share a thread.
        background: ``False``: no drain thread; call :meth:`drain` or
            :func:`~durability.replication.outbox.drain_once` yourself.
        backoff: The retry delays of the drain thread.
        timeout: Seconds per phase of an HTTP request.
    """

    def __init__(
        self,
        store: Store,
        target: str,
        api_key: str,
        *,
        project_id: str = "",
        http: httpx.Client | None = None,
        encoder: PayloadEncoder = CLEAR,
        limits: PlaneLimits | None = None,
        batch_rows: int = BATCH_ROWS,
        batch_bytes: int = BATCH_BYTES,
        in_flight: int = IN_FLIGHT,
        background: bool = True,
        backoff: Backoff | None = None,
        timeout: float = 10.0,
    ) -> None:
        if batch_rows < 1 or batch_bytes < 1 or in_flight < 1:
            raise ReplicationError(
                f"cannot connect: batch_rows={batch_rows}, batch_bytes={batch_bytes} and "
                f"in_flight={in_flight} must be positive integers",
                retryable=False,
            )
        self.store = store
        self.client = PlaneClient(target, api_key, http=http, timeout=timeout)
        self.target = self.client.target
        self.project_id = project_id
        self.encoder = encoder
        self.limits = limits if limits is not None else PlaneLimits()
        self._limits_given = limits is not None
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.in_flight = in_flight
        self.background = background
        self.backoff = backoff
        self.replicating = supports_outbox(store)
        self.active = False
        #: The plane's auth-check answer; ``None`` until one was had (nothing is sent before).
        self.plane_identity: dict[str, Any] | None = None
        self._agent_ids: dict[str, str] = {}
        self._lock = threading.Lock()
        self._in_use = threading.Lock()
        self._close_client_after_drain = False
        self._warned: set[int | None] = set()
        self.last_error: str | None = None
        self.retry_after: float | None = None
        self._beat_at = float("-inf")
        self._acked_at: datetime | None = None

    def __repr__(self) -> str:
        state = "active" if self.active else "closed"
        return f"<Connection {redact_url(self.store.url)} project={self.project_id!r} → {self.target} {state}>"

    # ------------------------------------------------------------------ lifecycle

    def open(self, *, verify: bool = True) -> Connection:
        """Check the key, record the connection in the store and start draining.

        A 401/403 at the auth check raises :class:`ReplicationError` and leaves nothing behind.
        A plane that cannot be reached is not an error: the connection is made, rows stay
        buffered and the drain retries.
        """
        if self.active:
            return self
        if not self.replicating:
            logger.info(
                "the %s store %r keeps no outbox, so it does not replicate; connecting is a no-op",
                self.store.provider or type(self.store).__name__,
                self.store,
            )
            self.active = True
            return self
        if verify:
            try:
                self._learn(self.client.auth_check())
            except ReplicationError as exc:
                if not exc.retryable:
                    self.client.close()
                    raise
                logger.warning("%s; connected anyway, rows stay buffered until it answers", exc)
        else:
            self._learn({})  # unverified: assume a plane that announces nothing
        _registry.attach(self)
        self.active = True
        self.store.record_connection(self.project_id, self.target)
        _registry.kick(self)
        return self

    def close(self, timeout: float = 10.0) -> bool:
        """Drain synchronously (up to ``timeout`` seconds), then disconnect.

        The store keeps the connection's record, marked closed: it still replicates, and what
        the plane lacks is sent at the next connect. Returns ``True`` when the last
        pass finished within the timeout. The key is dropped only after the drain that uses it
        has finished (a drain still running at the timeout keeps it until it ends, then closes
        it).
        """
        if not self.active:
            return True
        finished = True
        if self.replicating:
            finished = _registry.drain_now(self, timeout)
        self.active = False
        if not self.replicating:
            return finished
        _registry.detach(self)
        self.beat(force=True)
        try:
            # Closed, not forgotten: the store still replicates, so the rows the plane lacks
            # wait for the next connect and the sweep and `threads delete` keep them meanwhile.
            self.store.record_disconnection(self.project_id)
        except Exception:  # the store may be closed already; the record is advisory
            logger.debug("could not record the disconnect", exc_info=True)
        if self._in_use.acquire(timeout=max(0.0, timeout) if not finished else 1.0):
            try:
                self.client.close()
            finally:
                self._in_use.release()
        else:
            self._close_client_after_drain = True
        return finished

    def __enter__(self) -> Connection:
        return self

    # ------------------------------------------------------------------ what the plane announced

    def _learn(self, identity: dict[str, Any]) -> None:
        self.plane_identity = identity
        if not self._limits_given:
            self.limits = PlaneLimits.announced(identity.get("limits"))

    def identify(self) -> IngestAnswer | None:
        """Learn the plane's identity (its caps, how it keys rows) if not known yet: ``None``
        once known, else the buffered answer that kept it unknown (rows are not sent before)."""
        if self.plane_identity is not None:
            return None
        identity = self.client.identify()
        if isinstance(identity, IngestAnswer):
            return identity
        self._learn(identity)
        return None

    @property
    def own_ids(self) -> bool:
        """Whether the plane announced it keys rows by execution, namespace and checkpoint id,
        so the store's own checkpoint ids are sent; else derived ones are (a plane that may be
        idempotent by checkpoint id alone would drop one of two threads' ``step-1``)."""
        features = (self.plane_identity or {}).get("features")
        return isinstance(features, dict) and features.get("checkpoint_key") == list(ROW_KEY)

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def draining(self) -> Iterator[bool]:
        """Held by a drain pass: yields whether the connection may send now."""
        with self._in_use:
            try:
                yield self.active and self.replicating
            finally:
                if self._close_client_after_drain:
                    self._close_client_after_drain = False
                    self.client.close()

    # ------------------------------------------------------------------ draining

    def drain(self, timeout: float | None = 30.0) -> DrainReport | bool:
        """Drain now: through the drain thread (``True`` if the pass finished within ``timeout``),
        or on the caller's thread when the connection has none (the pass's report)."""
        if not self.active or not self.replicating:
            return DrainReport()
        if self.background:
            return _registry.drain_now(self, timeout)
        return drain_once(self)

    def wake(self) -> None:
        """Ask the drain thread for a pass (what a write does)."""
        _registry.wake(self)

    @property
    def worker(self) -> DrainWorker | None:
        """The drain thread this connection's store database uses, if any."""
        return _registry.worker_of(self)

    # ------------------------------------------------------------------ agents

    def register_agent(self, name: str, definition: dict[str, Any] | None = None) -> str | None:
        """Register an agent with the plane; later batches send its plane id as ``agent_id``.

        Best-effort: on failure the rows keep sending the name, and ``None`` is returned.
        """
        try:
            agent_id = self.client.register_agent(name, definition)
        except ReplicationError as exc:
            logger.warning("%s", exc)
            return None
        with self._lock:
            self._agent_ids[name] = agent_id
        return agent_id

    def agent_ids(self) -> dict[str, str]:
        """Registered agent names → plane ids (a copy, taken when a batch is mapped)."""
        with self._lock:
            return dict(self._agent_ids)

    # ------------------------------------------------------------------ the heartbeat

    def beat(self, *, acked: bool = False, force: bool = False) -> None:
        """Tell the store's connection record that this drain is alive (at most every
        :data:`HEARTBEAT_EVERY` seconds unless ``force``); ``acked``: the plane has just
        acknowledged a batch. A heartbeat that cannot be written is skipped, never an error."""
        if acked:
            self._acked_at = self.store.clock()
        now = time.monotonic()
        if not force and now - self._beat_at < HEARTBEAT_EVERY:
            return
        self._beat_at = now
        try:
            self.store.record_heartbeat(self.project_id, acked_at=self._acked_at)
        except Exception:  # the record is advisory; the next pass writes it again
            logger.debug("could not record the drain's heartbeat", exc_info=True)

    # ------------------------------------------------------------------ plane state (logged once)

    def note_unavailable(self, answer: IngestAnswer, rows: int) -> None:
        """Record a buffered answer; log it once per status until the plane takes rows again."""
        self.last_error, self.retry_after = answer.reason, answer.retry_after
        if answer.status in self._warned:
            return
        self._warned.add(answer.status)
        if answer.status == 403:
            logger.warning(
                "the plane %s refused %d checkpoints with HTTP 403: the domain is probably missing the "
                "connected_state_plane entitlement; they stay buffered and are sent once it is granted",
                self.target,
                rows,
            )
        else:
            logger.warning(
                "the plane %s could not take %d checkpoints (%s); they stay buffered and are retried",
                self.target,
                rows,
                answer.reason,
            )

    def note_available(self) -> None:
        """The plane answered a request: forget the buffered-state warnings."""
        self._warned.clear()
        self.last_error = self.retry_after = None


# ---------------------------------------------------------------------------- the process registry


class _Database:
    """The connections of one store database in this process, and their drain thread."""

    def __init__(self, key: str, backoff: Backoff | None) -> None:
        self.key = key
        self.connections: list[Connection] = []
        self.worker = DrainWorker(self.step, name=f"durability-drain:{key[:60]}", backoff=backoff)

    def step(self) -> DrainReport:
        """One pass per connection. A pass that raises does not keep the others from draining;
        the first error is raised once they all had their turn, so the worker backs off."""
        report = DrainReport()
        error: Exception | None = None
        for conn in list(self.connections):
            try:
                report += drain_once(conn)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return report

    def listener(self, store: Store) -> None:
        self.worker.wake()


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._databases: dict[str, _Database] = {}

    def attach(self, conn: Connection) -> None:
        key = database_key(conn.store)
        with self._lock:
            db = self._databases.get(key)
            if db is not None and any(c.project_id == conn.project_id for c in db.connections):
                raise ReplicationError(
                    f"cannot connect project {conn.project_id!r} of {conn.store!r}: this process already "
                    "has a connection for it; close that one first (one connection per project and store)",
                    retryable=False,
                )
            if db is None:
                db = self._databases[key] = _Database(key, conn.backoff)
            db.connections.append(conn)
            if conn.background:
                conn.store.add_write_listener(db.listener)
                db.worker.start()

    def find(self, store: Store, project_id: str) -> Connection | None:
        """This process's open connection of ``store``'s database for ``project_id``, if any."""
        with self._lock:
            db = self._databases.get(database_key(store))
            found = [c for c in db.connections if c.project_id == project_id] if db else []
        return found[0] if found else None

    def adopt(self, conn: Connection, store: Store) -> None:
        """Let ``conn`` drain through ``store``, another object for the same database (a
        notebook cell run again opens the store anew): its writes now wake the drain."""
        with self._lock:
            db = self._databases.get(database_key(store))
            if conn.store is store or db is None or conn not in db.connections:
                return
            old, conn.store = conn.store, store
            if conn.background:
                if not any(c.store is old and c.background for c in db.connections):
                    old.remove_write_listener(db.listener)
                store.add_write_listener(db.listener)

    def detach(self, conn: Connection) -> None:
        key = database_key(conn.store)
        with self._lock:
            db = self._databases.get(key)
            if db is None or conn not in db.connections:
                return
            db.connections.remove(conn)
            if not any(c.store is conn.store and c.background for c in db.connections):
                conn.store.remove_write_listener(db.listener)
            if not db.connections:
                del self._databases[key]
                db.worker.stop(timeout=0)

    def _db(self, conn: Connection) -> _Database | None:
        with self._lock:
            return self._databases.get(database_key(conn.store))

    def worker_of(self, conn: Connection) -> DrainWorker | None:
        db = self._db(conn)
        return db.worker if db is not None and db.worker.running else None

    def wake(self, conn: Connection) -> None:
        worker = self.worker_of(conn)
        if worker is not None:
            worker.wake()

    def kick(self, conn: Connection) -> None:
        worker = self.worker_of(conn)
        if worker is not None:
            worker.kick()

    def drain_now(self, conn: Connection, timeout: float | None) -> bool:
        worker = self.worker_of(conn)
        if worker is not None and conn.background:
            return worker.drain_now(timeout)
        try:
            drain_once(conn)
        except Exception:  # a close must finish; the rows stay buffered for the next connect
            logger.exception("the final drain of %r failed; its rows stay buffered", conn)
            return False
        return True

    def connections(self) -> list[Connection]:
        with self._lock:
            return [c for db in self._databases.values() for c in db.connections]


_registry = _Registry()


def connect(
    store: Store,
    target: str,
    api_key: str,
    *,
    project_id: str = "",
    verify: bool = True,
    **options: Any,
) -> Connection:
    """Connect ``store``'s project ``project_id`` to the plane at ``target`` and start draining.

    ``options`` are :class:`Connection`'s (``http``, ``encoder``, ``limits``, ``batch_rows``,
    ``batch_bytes``, ``in_flight``, ``background``, ``backoff``, ``timeout``).

    Connecting is idempotent: when this process already has an open connection of that store's
    database and project to the same plane with the same key (a notebook run twice, say), that
    connection is returned as it is (``options`` are not applied again), draining through the
    store object given from now on.

    Raises:
        ReplicationError: The plane refused the key (401/403), or this process already
            connected that project of that store to another plane or with another key.
    """
    existing = _registry.find(store, project_id)
    if existing is not None:
        return _reuse(existing, store, target, api_key)
    return Connection(store, target, api_key, project_id=project_id, **options).open(verify=verify)


def _reuse(conn: Connection, store: Store, target: str, api_key: str) -> Connection:
    """``conn`` again, for a second connect of its project; refused for another plane or key."""
    wanted = normalize_target(target)
    if conn.target != wanted or not conn.client.holds_key(api_key):
        other = f"to {conn.target}" if conn.target != wanted else "with another API key"
        raise ReplicationError(
            f"cannot connect project {conn.project_id!r} of {store!r} to {wanted}: this process "
            f"already has a connection for it {other}; close that one first "
            "(`replication.disconnect(store)`): one connection per project and store",
            retryable=False,
        )
    _registry.adopt(conn, store)
    return conn


def disconnect(
    store: Store | None = None, *, project_id: str | None = None, timeout: float = 10.0
) -> bool:
    """Drain and close this process's connections (of ``store`` / ``project_id`` when given).

    Returns ``True`` when every final drain finished within ``timeout`` seconds.
    """
    finished = True
    for conn in _registry.connections():
        if store is not None and database_key(conn.store) != database_key(store):
            continue
        if project_id is not None and conn.project_id != project_id:
            continue
        finished = conn.close(timeout) and finished
    return finished


def active_connections() -> list[Connection]:
    """This process's open connections."""
    return _registry.connections()
