"""The Redis store (``redis://``, ``rediss://``): plain Redis 7, no modules, Cluster-ready.

Key layout. ``P`` is the prefix (``durability:`` by default, option ``prefix=``); ``T`` is the
thread's tag, the first 32 hex digits of the SHA-256 of its id (a raw id may hold ``{`` or
``}``, which would break the hash tag). Every key of a thread is ``P{T}:…``, so all of them
sit in one cluster slot:

=============  =====================================================================
``P{T}:m``     hash: the thread id, the ``seq`` counter, totals, and its ledger record
``P{T}:c``     hash: ``seq`` → checkpoint document (the thread's checkpoints, one hash)
``P{T}:i``     hash: ``namespace \\0 checkpoint id`` → ``seq`` (uniqueness, ``get``)
``P{T}:s``     sorted set by ``seq`` (history in write order; the delete's work list)
``P{T}:x``     sorted set by name, ``namespace \\0 seq``: per-namespace latest and history
``P{T}:w``     hash: pending writes; ``P{T}:wx`` their write order per checkpoint
``P{T}:p``     hash: the pending park (and who claimed it)
``P{T}:sy``    hash: outbox state of rows the plane has
``P{T}:od``    hash: ``seq`` → document of every row the plane does not have yet
``P{T}:os``    hash: outbox state of those rows (attempts, errors, quarantine)
=============  =====================================================================

Every write is one Lua script over that slot (:mod:`durability.stores.redis_lua`), and each
ends by setting the thread's waiting retention (declared in its ledger, else the platform's)
as the absolute expiry of all of the thread's keys: the thread expires whole, a read never
extends it. ``od`` and ``os`` are the exception while the store replicates (a connection is
recorded, open or closed, see :attr:`Store.replicates`): an unreplicated checkpoint keeps its
outbox entry, with its whole document, until the plane has it, even after the thread's other
keys expire. A connect and a forget that changes the answer set those keys' expiry anew.

Keys that cannot share the thread's slot live under ``P{g}:`` (one slot): ``threads`` (paging),
``finished`` (due time, for the sweep), ``parks`` (deadline), ``outbox`` and ``quarantine``
(write time), ``connections``, ``format`` (the generation). They are written after the thread's
script, and any of them may miss an entry after a crash between the two steps, or hold one
its thread no longer supports. The thread's keys are the truth; the indexes are repaired:

* every reader skips an entry its thread does not support, removes it, then re-derives the
  thread's entries from its keys (remove, then repair: a writer racing the removal is re-added);
* on start (:meth:`RedisStore.reconcile`, once per opened store, one process at a time) the
  store scans its own keys and re-derives every thread's entries, then drops unsupported ones.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from durability import codec
from durability.clock import from_micros, to_micros
from durability.errors import (
    CheckpointConflict,
    CheckpointDeleteError,
    ConfigError,
    LeaseHeld,
    LeaseLost,
    ParkRefused,
    StoreError,
    StoreUnavailable,
)
from durability.model import Deleted, Lease, OutboxEntry, Park, ThreadRecord
from durability.settings import Retention
from durability.stores import redis_lua as lua
from durability.stores.base import (
    CHECKPOINT_COLUMNS,
    THREAD_COLUMNS,
    Capabilities,
    CheckpointKey,
    Columns,
    Connection,
    EncodedCheckpoint,
    EncodedWrite,
    RowKey,
    Store,
    ThreadPage,
    cap_bytes,
    chunks,
    column_chunks,
    conflict_message,
    lease_held_message,
    lease_lost_message,
    park_exists_message,
    redact_url,
    thread_row,
)

T = TypeVar("T")

DEFAULT_PREFIX = "durability:"
_PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
#: How long a connection failure is retried before the store reports itself unavailable.
_BACKOFF_S = (0.0, 0.05, 0.25, 1.0)
#: How long the cached "does this store replicate" answer is trusted.
_REPLICATING_TTL_S = 30.0
#: How long one process holds the reconcile lock at most.
_RECONCILE_LOCK_MS = 120_000


def thread_tag(thread_id: str) -> str:
    """The hash tag of a thread's keys: 32 hex digits of the SHA-256 of its id."""
    return hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:32]


class RedisStore(Store):
    """Checkpoints in Redis 7 (no modules), one hash tag per thread.

    Options (keyword or URL query): ``prefix`` (key namespace, default ``durability:``;
    letters, digits and ``_ . : -``), ``client_name`` (shown by ``CLIENT LIST``, default
    ``durability``), ``cluster=True`` (talk to a Redis Cluster), ``delete_batch`` (checkpoints and
    writes one delete round removes, default 1000), ``reconcile`` (repair the cross-slot
    indexes when the store is first used, default on), ``client`` (an existing redis client).
    """

    provider = "redis"
    capabilities = Capabilities(shared=True, ttl=True, replicates=True, can_park=True)

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str | None = None,
        client_name: str | None = None,
        cluster: bool | None = None,
        delete_batch: int = 1000,
        reconcile: bool = True,
        client: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url=url, **kwargs)
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ConfigError(
                f"cannot open {redact_url(url)}: a Redis store URL starts with redis:// or rediss://"
            )
        try:
            parts.port  # noqa: B018 - parsing it refuses a port out of range
        except ValueError as exc:
            raise ConfigError(
                f"cannot open {redact_url(url)}: {exc}; give a port from 1 to 65535"
            ) from None
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in ("prefix", "client_name", "cluster")}
        self._url = urlunsplit(
            parts._replace(query=urlencode([(k, v) for k, v in query if k not in ours]))
        )
        self.prefix = prefix if prefix is not None else ours.get("prefix", DEFAULT_PREFIX)
        if not _PREFIX.fullmatch(self.prefix):
            raise ConfigError(
                f"cannot open {redact_url(url)}: prefix {self.prefix!r} must be 1 to 100 letters, "
                "digits or _ . : - (no braces: they would move keys to another cluster slot)"
            )
        if delete_batch < 1:
            raise ConfigError(
                f"cannot open {redact_url(url)}: delete_batch={delete_batch} must be at least 1"
            )
        self.cluster = (
            cluster
            if cluster is not None
            else ours.get("cluster", "").lower() in ("1", "true", "yes", "on")
        )
        self.client_name = client_name or ours.get("client_name") or "durability"
        self.delete_batch = delete_batch
        self._reconcile_on_start = reconcile
        self._client_obj = client
        self._client_lock = threading.Lock()
        self._scripts: dict[str, Any] = {}
        self._replicating = False
        self._replicating_at = float("-inf")
        g = f"{self.prefix}{{g}}:"
        self._k_threads, self._k_finished, self._k_parks = (
            g + "threads",
            g + "finished",
            g + "parks",
        )
        self._k_outbox, self._k_quarantine = g + "outbox", g + "quarantine"
        self._k_connections, self._k_format, self._k_reconcile = (
            g + "connections",
            g + "format",
            g + "reconcile",
        )
        #: Per project, its drain's heartbeat and last acknowledged batch (written apart from
        #: the connection record, which a disconnect rewrites).
        self._k_drains = g + "drains"

    # ------------------------------------------------------------------ plumbing

    @property
    def _client(self) -> Any:
        # Built on first use: a cluster client talks to the servers as soon as it exists.
        if self._client_obj is None:
            with self._client_lock, self._errors("connect"):
                if self._client_obj is None:
                    options: dict[str, Any] = {
                        "retry": Retry(NoBackoff(), 0),  # retries are ours: see _run
                        "client_name": self.client_name,
                    }
                    if self.cluster:
                        self._client_obj = RedisCluster.from_url(self._url, **options)
                    else:
                        self._client_obj = redis.Redis.from_url(
                            self._url, health_check_interval=30, **options
                        )
        return self._client_obj

    def close(self) -> None:
        if self._client_obj is not None:
            self._client_obj.close()

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Driver errors → :mod:`durability.errors` (used by :meth:`_run`, the one boundary)."""
        try:
            yield
        except redis.ConnectionError as exc:  # redis-py's TimeoutError is one too
            raise StoreUnavailable(
                f"cannot {action}: the Redis server {redact_url(self.url)} is unavailable ({exc}); "
                "check that it is running and reachable, then retry"
            ) from exc
        except redis.TimeoutError as exc:
            raise StoreUnavailable(
                f"cannot {action}: the Redis server {redact_url(self.url)} did not answer in time "
                f"({exc}); check its load and network, then retry"
            ) from exc
        except redis.RedisError as exc:
            raise StoreError(
                f"cannot {action} in {redact_url(self.url)}: Redis refused it ({exc}); check the "
                f"server's log (memory limit, a read-only replica) and that nothing else writes "
                f"keys under the prefix {self.prefix!r}"
            ) from exc

    def _run(self, action: str, call: Callable[[bool], T]) -> T:
        """The one boundary: run ``call(retry)``, retrying dropped connections, mapping errors.

        A connection that drops is replaced and the call is sent again with ``retry=True``;
        every write script is safe to resend (a put whose first attempt landed finds its own
        identical row and returns it; a claim carries its token).
        """
        for attempt, pause in enumerate(_BACKOFF_S):
            try:
                with self._errors(action):
                    return call(attempt > 0)
            except StoreUnavailable:
                if attempt == len(_BACKOFF_S) - 1:
                    raise
                time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _script(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(getattr(lua, name))
        return script

    @property
    def _index_in_script(self) -> bool:
        """A single server lets a put's script write the cross-slot index entries too."""
        return not self.cluster

    def _keys(self, tag: str) -> list[str]:
        base = f"{self.prefix}{{{tag}}}:"
        return [base + k for k in lua.THREAD_KEYS]

    def _write_args(self, retry: bool) -> list[Any]:
        ttl_ms = self.settings.waiting_retention // timedelta(milliseconds=1)
        return [ttl_ms, "1" if self._store_replicates() else "0", "1" if retry else "0"]

    def _eval(
        self,
        action: str,
        name: str,
        tag: str,
        args: Sequence[Any],
        *,
        write: bool = True,
        extra_keys: Sequence[str] = (),
    ) -> Any:
        keys = [*self._keys(tag), *extra_keys]
        script = self._script(name)

        def call(retry: bool) -> Any:
            full = [*self._write_args(retry), *args] if write else list(args)
            return script(keys=keys, args=full)

        return self._run(f"{action}", call)

    def _eval_many(
        self,
        action: str,
        name: str,
        calls: Sequence[tuple[str, Sequence[Any]]],
        *,
        write: bool = True,
        extra_keys: Sequence[str] = (),
    ) -> list[Any]:
        """One script over several threads: pipelined on one server, one by one on a cluster."""
        if len(calls) == 1 or self.cluster:
            return [
                self._eval(action, name, tag, args, write=write, extra_keys=extra_keys)
                for tag, args in calls
            ]
        script = self._script(name)

        def call(retry: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for tag, args in calls:
                full = [*self._write_args(retry), *args] if write else list(args)
                script(keys=[*self._keys(tag), *extra_keys], args=full, client=pipe)
            return list(pipe.execute())

        return self._run(action, call)

    def _index(
        self, action: str, *, add: _IndexOps | None = None, remove: _IndexOps | None = None
    ) -> None:
        """Step 2 of a write: bring the cross-slot indexes in line (idempotent)."""
        add, remove = add or _IndexOps(), remove or _IndexOps()
        if add.empty and remove.empty:
            return

        args: list[Any] = []
        for position, entries in enumerate(remove.indexes(), start=1):
            for member in entries:
                args += ["-", position, member]
        for position, entries in enumerate(add.indexes(), start=1):
            for member, score in entries.items():
                args += ["+", position, member, score]
        keys = [
            self._k_threads,
            self._k_finished,
            self._k_parks,
            self._k_outbox,
            self._k_quarantine,
        ]
        script = self._script("INDEX")
        # One script on the indexes' slot: a single command, and atomic there.
        self._run(action, lambda _retry: script(keys=keys, args=args))

    def _store_replicates(self) -> bool:
        if time.monotonic() - self._replicating_at > _REPLICATING_TTL_S:
            self._refresh_replicating()
        return self._replicating

    def _refresh_replicating(self) -> None:
        count = self._run("read connections", lambda _r: self._client.hlen(self._k_connections))
        self._replicating = bool(count)
        self._replicating_at = time.monotonic()

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        self._refresh_replicating()
        if self._reconcile_on_start:
            self.reconcile()

    def _read_generation(self) -> int | None:
        value = self._run("read the format generation", lambda _r: self._client.get(self._k_format))
        return None if value is None else int(value)

    def _write_generation(self, generation: int) -> None:
        self._run(
            "record the format generation",
            lambda _r: self._client.set(self._k_format, str(generation)),
        )

    def _scan(self, suffix: str) -> Iterator[bytes]:
        return iter(self._client.scan_iter(match=f"{self.prefix}{{*}}{suffix}", count=1000))

    def _has_any_checkpoint(self) -> bool:
        def call(_retry: bool) -> bool:
            return any(key.endswith(b":c") for key in self._scan(":c"))

        return self._run("look for checkpoints", call)

    def _wipe(self) -> None:
        def call(_retry: bool) -> None:
            batch: list[bytes] = []
            for key in self._scan("*"):
                batch.append(key)
                if len(batch) >= 500:
                    self._unlink(batch)
            self._unlink(batch)

        self._run("reset the store", call)

    def _unlink(self, keys: list[bytes]) -> None:
        if keys:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.unlink(key)
            pipe.execute()
            keys.clear()

    def reconcile(self) -> int:
        """Repair the cross-slot indexes from the threads' own keys; returns the threads seen.

        Runs when the store is first used (unless opened with ``reconcile=False``). One process
        at a time: one that finds another reconciling skips, the other repairs the same damage.
        """
        token = uuid.uuid4().hex
        taken = self._run(
            "reconcile the indexes",
            lambda _r: self._client.set(self._k_reconcile, token, nx=True, px=_RECONCILE_LOCK_MS),
        )
        if not taken:
            return 0
        try:
            tags: set[str] = set()

            def scan(_retry: bool) -> None:
                for key in self._scan(":*"):
                    tag, _, suffix = key.decode().rpartition("}:")
                    if suffix in ("m", "os"):
                        tags.add(tag.rpartition("{")[2])

            self._run("reconcile the indexes", scan)
            tags.discard("g")
            ordered = sorted(tags)
            for chunk in chunks(ordered):
                self._repair(chunk)
            self._drop_unsupported()
            return len(tags)
        finally:
            self._run(
                "reconcile the indexes",
                lambda _r: self._script("RELEASE_LOCK")(keys=[self._k_reconcile], args=[token]),
            )

    def _index_state(self, tags: Sequence[str]) -> list[_ThreadIndex]:
        states = self._eval_many(
            "read a thread's index state", "INDEX_STATE", [(t, []) for t in tags], write=False
        )
        return [_ThreadIndex.parse(tag, raw) for tag, raw in zip(tags, states, strict=True)]

    def _repair(self, tags: Sequence[str]) -> None:
        """Add every index entry the threads' keys support (never removes)."""
        if not tags:
            return
        add = _IndexOps()
        for state in self._index_state(sorted(set(tags))):
            state.entries(add)
        self._index("repair the indexes", add=add)

    def _forget(self, remove: _IndexOps, tags: Iterable[str]) -> None:
        """Drop index entries their threads do not support, then re-add what a racer wrote."""
        self._index("clean the indexes", remove=remove)
        self._repair(list(tags))

    def _drop_unsupported(self) -> None:
        members: dict[str, list[tuple[bytes, float]]] = {}

        def scan(_retry: bool) -> None:
            for key in (
                self._k_threads,
                self._k_finished,
                self._k_parks,
                self._k_outbox,
                self._k_quarantine,
            ):
                members[key] = list(self._client.zscan_iter(key, count=1000))

        self._run("reconcile the indexes", scan)
        tags = sorted({_member_tag(m) for entries in members.values() for m, _ in entries})
        supported = _IndexOps()
        for chunk in chunks(tags):
            for state in self._index_state(chunk):
                state.entries(supported)
        remove = _IndexOps()
        for key, target in (
            (self._k_threads, remove.threads),
            (self._k_finished, remove.finished),
            (self._k_parks, remove.parks),
            (self._k_outbox, remove.outbox),
            (self._k_quarantine, remove.quarantine),
        ):
            have = {
                self._k_threads: supported.threads,
                self._k_finished: supported.finished,
                self._k_parks: supported.parks,
                self._k_outbox: supported.outbox,
                self._k_quarantine: supported.quarantine,
            }[key]
            for member, _ in members[key]:
                name = member.decode()
                if name not in have:
                    target[name] = 0
        if not remove.empty:
            self._forget(remove, {_member_tag(m.encode()) for m in remove.members()})

    # ------------------------------------------------------------------ checkpoints

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        groups: dict[str, list[int]] = {}
        for n, row in enumerate(rows):
            groups.setdefault(thread_tag(row.thread_id), []).append(n)
        docs = [_doc(row) for row in rows]
        if len(groups) > 1:
            # Atomic per thread (each thread is its own slot); refuse before writing any.
            self._check_unstored(rows, groups)
        calls = []
        for tag, members in groups.items():
            args: list[Any] = ["1" if synced else "0", rows[members[0]].thread_id, len(members)]
            for n in members:
                args += _row_args(rows[n], docs[n])
            calls.append((tag, args))
        # On one server the script indexes its rows itself; a cluster needs the second step.
        extra = [self._k_threads, self._k_outbox] if self._index_in_script else []
        results = self._eval_many("put a checkpoint", "PUT", calls, extra_keys=extra)
        seqs: list[int] = [0] * len(rows)
        add = _IndexOps()
        for (tag, members), result in zip(groups.items(), results, strict=True):
            if result[0] == b"conflict":
                row = rows[members[int(result[1])]]
                raise CheckpointConflict(
                    conflict_message(row.thread_id, row.namespace, row.checkpoint_id)
                )
            write_time = int(result[1])
            add.threads[tag] = 0
            for n, seq in zip(members, result[2:], strict=True):
                seqs[n] = int(seq)
                if not synced:
                    add.outbox[_member(tag, seqs[n])] = write_time
        if not self._index_in_script:
            self._index("index a checkpoint", add=add)
        return seqs

    def _check_unstored(self, rows: list[EncodedCheckpoint], groups: dict[str, list[int]]) -> None:
        calls = [
            (tag, [f"{rows[n].namespace}\0{rows[n].checkpoint_id}" for n in members])
            for tag, members in groups.items()
        ]
        found = self._eval_many("put checkpoints", "ANY_STORED", calls, write=False)
        for (_tag, members), index in zip(groups.items(), found, strict=True):
            if index >= 0:
                row = rows[members[index]]
                raise CheckpointConflict(
                    f"one of {len(rows)} checkpoints was refused, nothing was written: "
                    + conflict_message(row.thread_id, row.namespace, row.checkpoint_id)
                )

    def _latest(self, thread_id: str, namespace: str) -> EncodedCheckpoint | None:
        hit = self._eval(
            "read the latest checkpoint", "LATEST", thread_tag(thread_id), [namespace], write=False
        )
        return _hit(hit)

    def _latest_any(self, thread_id: str) -> EncodedCheckpoint | None:
        hit = self._eval(
            "read the latest checkpoint", "LATEST_ANY", thread_tag(thread_id), [], write=False
        )
        return _hit(hit)

    def _get(self, thread_id: str, namespace: str, checkpoint_id: str) -> EncodedCheckpoint | None:
        hit = self._eval(
            "read a checkpoint",
            "GET",
            thread_tag(thread_id),
            [namespace, checkpoint_id],
            write=False,
        )
        row = _hit(hit)
        return row if row is not None and row.thread_id == thread_id else None

    def _history(
        self, thread_id: str, namespace: str | None, after_seq: int | None, limit: int | None
    ) -> list[EncodedCheckpoint]:
        args = [
            "0" if namespace is None else "1",
            namespace or "",
            "" if after_seq is None else str(after_seq),
            "-1" if limit is None else str(limit),
        ]
        flat = self._eval(
            "read a thread's history", "HISTORY", thread_tag(thread_id), args, write=False
        )
        rows = [_undoc(flat[j + 1], int(flat[j])) for j in range(0, len(flat), 2)]
        return [r for r in rows if r.thread_id == thread_id]

    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        groups: dict[str, list[EncodedWrite]] = {}
        for w in rows:
            groups.setdefault(thread_tag(w.thread_id), []).append(w)
        calls = []
        for tag, writes in groups.items():
            args: list[Any] = [writes[0].thread_id, len(writes)]
            for w in writes:
                args += [w.namespace, w.checkpoint_id, w.task_id, str(w.idx), _write_doc(w)]
            calls.append((tag, args))
        self._eval_many("store pending writes", "PUT_WRITES", calls)
        self._index("index a thread", add=_IndexOps(threads=dict.fromkeys(groups, 0)))

    def _writes(self, thread_id: str, namespace: str, checkpoint_id: str) -> list[EncodedWrite]:
        docs = self._eval(
            "read pending writes",
            "WRITES",
            thread_tag(thread_id),
            [namespace, checkpoint_id],
            write=False,
        )
        return [
            _unwrite(doc, thread_id, namespace, checkpoint_id) for doc in docs if doc is not None
        ]

    def _newest_first(
        self, thread_id: str, namespace: str | None, before: str | None, limit: int | None
    ) -> list[EncodedCheckpoint]:
        tag = thread_tag(thread_id)
        if namespace is not None:
            args = [namespace, before or "", -1 if limit is None else limit]
            flat = self._eval("list a thread's checkpoints", "NEWEST_FIRST", tag, args, write=False)
        else:
            ids = self._eval("list a thread's checkpoints", "ALL_IDS", tag, [], write=False)
            keys = [key.decode() for key in ids]
            chosen = sorted(
                (k for k in keys if before is None or k.partition("\0")[2] < before),
                key=lambda k: k.partition("\0")[2],
                reverse=True,
            )[:limit]
            flat = (
                self._eval("list a thread's checkpoints", "GET_MANY", tag, chosen, write=False)
                if chosen
                else []
            )
        rows = [_undoc(flat[j + 1], int(flat[j])) for j in range(0, len(flat), 2)]
        return [r for r in rows if r.thread_id == thread_id]

    def _writes_of(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[EncodedWrite]]:
        args = [part for key in keys for part in key]
        flat = self._eval(
            "read pending writes", "WRITES_OF", thread_tag(thread_id), args, write=False
        )
        found: dict[CheckpointKey, list[EncodedWrite]] = {}
        pos = 0
        for namespace, checkpoint_id in keys:
            count = int(flat[pos])
            docs = flat[pos + 1 : pos + 1 + count]
            pos += 1 + count
            found[(namespace, checkpoint_id)] = [
                _unwrite(doc, thread_id, namespace, checkpoint_id)
                for doc in docs
                if doc is not None
            ]
        return found

    def _set_status(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        status: str,
        interrupt_reason: str | None,
        interrupt_context: str,
    ) -> bool:
        tag = thread_tag(thread_id)
        # Documents are written whole: read, change, and write back only if nobody changed it
        # in between (only another set_status on the same checkpoint can).
        for _attempt in range(20):
            hit = self._eval(
                "change a checkpoint's status", "GET", tag, [namespace, checkpoint_id], write=False
            )
            row = _hit(hit)
            if row is None or row.thread_id != thread_id:
                return False
            old = hit[1]
            delta = _utf8_len(interrupt_context) - _utf8_len(row.interrupt_context)
            row.status, row.interrupt_reason = status, interrupt_reason
            row.interrupt_context = interrupt_context
            row.size_bytes += delta
            args = [hit[0], old, _doc(row), delta]
            if self._eval("change a checkpoint's status", "SET_DOC", tag, args):
                self._index("index a thread", add=_IndexOps(threads={tag: 0}))
                return True
        raise StoreError(
            f"cannot change the status of checkpoint {checkpoint_id[:80]!r} in thread "
            f"{thread_id[:80]!r}: it kept changing under concurrent updates; retry"
        )

    def _delete_checkpoints(self, thread_id: str, keys: list[CheckpointKey]) -> Deleted:
        tag = thread_tag(thread_id)
        args = [part for key in keys for part in key]
        out = self._eval("delete checkpoints", "DELETE_CHECKPOINTS", tag, args)
        gone = _IndexOps()
        for seq in out[2:]:
            gone.outbox[_member(tag, int(seq))] = gone.quarantine[_member(tag, int(seq))] = 0
        self._index("clean the indexes", remove=gone)
        return Deleted(checkpoints=int(out[0]), writes=int(out[1]))

    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[tuple[str, str, str]]:
        wanted = set(run_ids)
        found = []
        for record in self.iter_threads():
            # The run id is in each document's header: no payload is decoded.
            for row in self._history(record.thread_id, None, None, None):
                if row.run_id in wanted:
                    found.append((row.thread_id, row.namespace, row.checkpoint_id))
        return found

    # ------------------------------------------------------------------ threads

    def _records(self, tags: Sequence[str]) -> list[ThreadRecord | None]:
        raw = self._eval_many("look up a thread", "RECORD", [(t, []) for t in tags], write=False)
        return [_record(_pairs(fields), int(count)) if fields else None for fields, count in raw]

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        low = f"({cursor}" if cursor else "-"
        tags = [
            t.decode()
            for t in self._run(
                "list threads",
                lambda _r: self._client.zrangebylex(self._k_threads, low, "+", start=0, num=limit),
            )
        ]
        records = self._records(tags) if tags else []
        dangling = [t for t, r in zip(tags, records, strict=True) if r is None]
        if dangling:
            self._forget(_IndexOps(threads=dict.fromkeys(dangling, 0)), dangling)
        found = [r for r in records if r is not None]
        return ThreadPage(found, tags[-1] if len(tags) == limit else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        record = self._records([thread_tag(thread_id)])[0]
        return record if record is not None and record.thread_id == thread_id else None

    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        tags = [
            t.decode()
            for t in self._run(
                "list finished threads",
                lambda _r: self._client.zrangebyscore(self._k_finished, "-inf", to_micros(now)),
            )
        ]
        if not tags:
            return []
        records = self._records(tags)
        stale = [t for t, r in zip(tags, records, strict=True) if r is None or r.due_at is None]
        if stale:
            self._forget(_IndexOps(finished=dict.fromkeys(stale, 0)), stale)
        return [r for r in records if r is not None and r.due_at is not None and r.due_at <= now]

    def _delete_thread(self, thread_id: str) -> Deleted:
        tag = thread_tag(thread_id)
        total = Deleted()
        gone = _IndexOps()
        previous: tuple[int, int] | None = None
        rounds = 0
        while True:
            rounds += 1
            out = self._eval("delete a thread", "DELETE_ROUND", tag, [self.delete_batch])
            removed_cp, removed_w, left_cp, left_w, done = (int(v) for v in out[:5])
            total += Deleted(checkpoints=removed_cp, writes=removed_w)
            for seq in out[5:]:
                gone.outbox[_member(tag, int(seq))] = 0
                gone.quarantine[_member(tag, int(seq))] = 0
            if done:
                break
            # Seed 004: fail at the first round, counting from the second, that leaves the
            # thread holding no fewer checkpoints and writes than the round before.
            if previous is not None and left_cp >= previous[0] and left_w >= previous[1]:
                self._index("clean the indexes", remove=gone)
                raise CheckpointDeleteError(
                    f"cannot delete thread {thread_id[:80]!r} from {redact_url(self.url)}: round "
                    f"{rounds} left it holding {left_cp} checkpoints and {left_w} pending writes, "
                    f"no fewer than round {rounds - 1} did ({previous[0]} and {previous[1]}); a run is "
                    "still writing to it: stop that run (or let it park), then delete again"
                )
            previous = (left_cp, left_w)
        gone.threads[tag] = gone.finished[tag] = gone.parks[tag] = 0
        self._forget(gone, [tag])
        return total

    # ------------------------------------------------------------------ ledger

    def _ledger(
        self, action: str, thread_id: str, values: dict[str, Any], drop: Sequence[str] = ()
    ) -> None:
        args: list[Any] = [thread_id]
        for field, value in values.items():
            args += [field, value]
        if drop:
            args += ["--", *drop]
        self._eval(action, "LEDGER", thread_tag(thread_id), args)

    def _ledger_start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        values: dict[str, Any] = {"ow": owner, "ri": run_id, "st": to_micros(now)}
        drop = []
        for field, value in (("dw", retention.waiting), ("df", retention.finished)):
            if value is None:
                drop.append(field)
            else:
                values[field] = value // timedelta(microseconds=1)
        self._ledger("record a run start", thread_id, values, drop)
        self._index("index a thread", add=_IndexOps(threads={thread_tag(thread_id): 0}))

    def _ledger_mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        tag = thread_tag(thread_id)
        self._ledger(
            "mark a thread finished",
            thread_id,
            {"fa": to_micros(finished_at), "da": to_micros(due)},
        )
        self._index(
            "index a finished thread",
            add=_IndexOps(threads={tag: 0}, finished={tag: to_micros(due)}),
        )

    def _ledger_unmark(self, thread_id: str) -> None:
        tag = thread_tag(thread_id)
        self._eval("unmark a finished thread", "UNMARK", tag, [])
        self._forget(_IndexOps(finished={tag: 0}), [tag])

    def _lease_acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        tag = thread_tag(thread_id)
        args = [thread_id, holder, run_id, to_micros(now), to_micros(expires_at)]
        out = self._eval("take a lease", "LEASE_ACQUIRE", tag, args)
        if out[0] == b"held":
            raise LeaseHeld(lease_held_message(thread_id, _lease(thread_id, out[1:])))
        self._index("index a thread", add=_IndexOps(threads={tag: 0}))
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=run_id,
            acquired_at=now,
            expires_at=expires_at,
        )

    def _lease_renew(
        self, thread_id: str, holder: str, now: datetime, expires_at: datetime
    ) -> Lease:
        out = self._eval(
            "renew a lease", "LEASE_RENEW", thread_tag(thread_id), [holder, to_micros(expires_at)]
        )
        if out[0] == b"lost":
            current = _lease(thread_id, out[1:]) if len(out) > 1 else None
            raise LeaseLost(lease_lost_message(thread_id, holder, current))
        acquired = out[2].decode()
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=out[1].decode(),
            acquired_at=from_micros(int(acquired)) if acquired else None,
            expires_at=expires_at,
        )

    def _lease_release(self, thread_id: str, holder: str) -> None:
        self._eval("release a lease", "LEASE_RELEASE", thread_tag(thread_id), [holder])

    # ------------------------------------------------------------------ parks

    def _insert_park(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        tag = thread_tag(park.thread_id)
        deadline = to_micros(park.deadline)
        args = [
            "1" if synced else "0",
            park.thread_id,
            _park_doc(park),
            deadline,
            *_row_args(row, _doc(row)),
        ]
        out = self._eval("park a run", "PARK", tag, args)
        if out[0] == b"park_exists":
            raise ParkRefused(park_exists_message(park.thread_id))
        if out[0] == b"conflict":
            raise CheckpointConflict(
                conflict_message(row.thread_id, row.namespace, row.checkpoint_id)
            )
        seq = int(out[2])
        add = _IndexOps(threads={tag: 0}, parks={tag: deadline})
        if not synced:
            add.outbox[_member(tag, seq)] = int(out[1])
        self._index("index a park", add=add)
        return seq

    def _claim_park(self, thread_id: str) -> Park | None:
        tag = thread_tag(thread_id)
        token = uuid.uuid4().hex
        doc = self._eval("claim a park", "CLAIM", tag, [token])
        self._forget(_IndexOps(parks={tag: 0}), [tag])
        if doc is None:
            return None
        park = _park(doc)
        return park if park.thread_id == thread_id else None

    def _get_park(self, thread_id: str) -> Park | None:
        doc, claimed = self._eval(
            "read a park", "PARK_READ", thread_tag(thread_id), [], write=False
        )
        if doc is None or claimed is not None:
            return None
        park = _park(doc)
        return park if park.thread_id == thread_id else None

    def _parks(self) -> list[Park]:
        tags = [
            t.decode()
            for t in self._run("list parks", lambda _r: self._client.zrange(self._k_parks, 0, -1))
        ]
        if not tags:
            return []
        raw = self._eval_many("list parks", "PARK_READ", [(t, []) for t in tags], write=False)
        found, stale = [], []
        for tag, (doc, claimed) in zip(tags, raw, strict=True):
            if doc is None or claimed is not None:
                stale.append(tag)
            else:
                found.append(_park(doc))
        if stale:
            self._forget(_IndexOps(parks=dict.fromkeys(stale, 0)), stale)
        return found

    # ------------------------------------------------------------------ outbox

    def _fetch_unsynced(
        self, limit: int, max_bytes: int | None, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        rows: list[EncodedCheckpoint] = []
        stale = _IndexOps()
        offset, window = 0, max(limit, 100)
        while len(rows) < limit:
            entries = self._run("read the outbox", self._outbox_window(offset, window))
            if not entries:
                break
            offset += len(entries)
            members = [m.decode() for m, _score in entries]
            for member, (doc, _header, quarantined) in zip(
                members, self._outbox_rows(members), strict=True
            ):
                if doc is None or quarantined:  # gone, or moved to quarantine: repair
                    stale.outbox[member] = 0
                else:
                    row = _undoc(doc, _member_seq(member))
                    if (project_id is None or row.project_id == project_id) and (
                        row.thread_id,
                        row.seq,
                    ) not in exclude:
                        rows.append(row)
                        if len(rows) == limit:
                            break
            if len(entries) < window:
                break
        if not stale.empty:
            self._forget(stale, {_member_tag(m.encode()) for m in stale.members()})
        return cap_bytes(rows, max_bytes)

    def _outbox_window(self, offset: int, size: int) -> Callable[[bool], list[Any]]:
        def call(_retry: bool) -> list[Any]:
            return list(
                self._client.zrange(self._k_outbox, offset, offset + size - 1, withscores=True)
            )

        return call

    def _outbox_rows(self, members: Sequence[str]) -> list[tuple[bytes | None, bytes | None, bool]]:
        groups: dict[str, list[str]] = {}
        for member in members:
            groups.setdefault(_member_tag(member.encode()), []).append(str(_member_seq(member)))
        raw = self._eval_many("read the outbox", "OUTBOX_READ", list(groups.items()), write=False)
        found: dict[str, tuple[bytes | None, bytes | None, bool]] = {}
        for (tag, seqs), flat in zip(groups.items(), raw, strict=True):
            for j, seq in enumerate(seqs):
                doc, header, reason = flat[5 * j], flat[5 * j + 1], flat[5 * j + 2]
                found[_member(tag, int(seq))] = (
                    doc if header is not None else None,
                    header,
                    reason is not None,
                )
        return [found[m] for m in members]

    def _by_thread(self, keys: Iterable[RowKey]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for thread_id, seq in keys:
            groups.setdefault(thread_tag(thread_id), []).append(seq)
        return groups

    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        groups = self._by_thread(keys)
        if not groups:
            return
        calls = [(tag, [to_micros(now), *seqs]) for tag, seqs in groups.items()]
        moved = self._eval_many("mark rows synced", "OUTBOX_SYNCED", calls)
        remove = _IndexOps()
        for (tag, _), seqs in zip(calls, moved, strict=True):
            for seq in seqs:
                remove.outbox[_member(tag, int(seq))] = 0
                remove.quarantine[_member(tag, int(seq))] = 0
        self._index("index synced rows", remove=remove)

    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        groups: dict[str, list[Any]] = {}
        for (thread_id, seq), reason in reasons.items():
            groups.setdefault(thread_tag(thread_id), []).extend([seq, reason])
        if not groups:
            return
        calls = [(tag, [to_micros(now), *pairs]) for tag, pairs in groups.items()]
        out = self._eval_many("quarantine rows", "OUTBOX_QUARANTINE", calls)
        add, remove = _IndexOps(), _IndexOps()
        for (tag, _), flat in zip(calls, out, strict=True):
            for j in range(0, len(flat), 2):
                member = _member(tag, int(flat[j]))
                remove.outbox[member] = 0
                add.quarantine[member] = _header_time(flat[j + 1])
        self._index("index quarantined rows", add=add, remove=remove)

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        groups = self._by_thread(keys)
        if groups:
            calls = [
                (tag, ["0" if error is None else "1", error or "", *seqs])
                for tag, seqs in groups.items()
            ]
            self._eval_many("record a send attempt", "OUTBOX_ATTEMPT", calls)

    def _release(self, keys: list[RowKey] | None) -> int:
        if keys is None:
            members = self._run(
                "release quarantined rows",
                lambda _r: self._client.zrange(self._k_quarantine, 0, -1),
            )
            groups: dict[str, list[int]] = {}
            for member in members:
                groups.setdefault(_member_tag(member), []).append(_member_seq(member.decode()))
        else:
            groups = self._by_thread(keys)
        if not groups:
            return 0
        calls = [(tag, list(seqs)) for tag, seqs in groups.items()]
        out = self._eval_many("release quarantined rows", "OUTBOX_RELEASE", calls)
        add, remove = _IndexOps(), _IndexOps()
        for (tag, _), flat in zip(calls, out, strict=True):
            for j in range(0, len(flat), 2):
                member = _member(tag, int(flat[j]))
                remove.quarantine[member] = 0
                add.outbox[member] = _header_time(flat[j + 1])
        self._index("index released rows", add=add, remove=remove)
        return len(add.outbox)

    def _outbox(
        self,
        state: str | None,
        project_id: str | None,
        thread_id: str | None,
        after_seq: int | None,
        limit: int | None,
    ) -> list[OutboxEntry]:
        if thread_id is not None:
            tags = [thread_tag(thread_id)]
        else:
            sources = {
                "pending": [self._k_outbox],
                "quarantined": [self._k_quarantine],
            }.get(state or "", [self._k_outbox, self._k_quarantine, self._k_threads])

            def scan(_retry: bool) -> set[str]:
                found: set[str] = set()
                for key in sources:
                    found |= {_member_tag(m) for m, _ in self._client.zscan_iter(key, count=1000)}
                return found

            tags = sorted(self._run("read the outbox", scan))
        entries: list[tuple[int, OutboxEntry]] = []
        if tags:
            raw = self._eval_many(
                "read the outbox", "OUTBOX_LIST", [(t, []) for t in tags], write=False
            )
            for pending_fields, synced_fields, _name in raw:
                entries += _entries(_pairs(pending_fields), synced=False)
                entries += _entries(_pairs(synced_fields), synced=True)
        chosen = [
            (t, e)
            for t, e in entries
            if (state is None or e.state == state)
            and (project_id is None or e.project_id == project_id)
            and (thread_id is None or e.thread_id == thread_id)
            and (after_seq is None or e.seq > after_seq)
        ]
        chosen.sort(key=lambda pair: (pair[0], pair[1].thread_id, pair[1].seq))
        result = [e for _, e in chosen]
        return result if limit is None else result[:limit]

    def _record_connection(self, connection: Connection) -> None:
        record: dict[str, Any] = {
            "target": connection.target,
            "at": to_micros(connection.connected_at),
        }
        if connection.disconnected_at is not None:
            record["off"] = to_micros(connection.disconnected_at)
        value = orjson.dumps(record)
        self._run(
            "record a connection",
            lambda _r: self._client.hset(self._k_connections, connection.project_id, value),
        )
        self._refresh_replicating()
        if connection.open:
            # Rows written before the first connect carry their thread's expiry: from now on
            # they wait for the plane (and a writer still on the cached answer is corrected).
            self._apply_outbox_expiry()

    def _forget_connection(self, project_id: str) -> None:
        self._run(
            "forget a connection", lambda _r: self._client.hdel(self._k_connections, project_id)
        )
        self._run("forget a connection", lambda _r: self._client.hdel(self._k_drains, project_id))
        self._refresh_replicating()
        if not self._replicating:
            self._apply_outbox_expiry()

    def _connections(self) -> list[Connection]:
        raw = self._run("read connections", lambda _r: self._client.hgetall(self._k_connections))
        drains = self._run("read connections", lambda _r: self._client.hgetall(self._k_drains))
        found = []
        for project, value in sorted(raw.items()):
            data = orjson.loads(value)
            beat = orjson.loads(drains.get(project, b"{}"))
            found.append(
                Connection(
                    project.decode(),
                    data["target"],
                    from_micros(data["at"]),
                    from_micros(data["off"]) if "off" in data else None,
                    from_micros(beat["seen"]) if "seen" in beat else None,
                    from_micros(beat["ack"]) if "ack" in beat else None,
                )
            )
        return found

    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        def beat(_retry: bool) -> None:
            current = orjson.loads(self._client.hget(self._k_drains, project_id) or b"{}")
            current["seen"] = to_micros(seen_at)
            if acked_at is not None:
                current["ack"] = to_micros(acked_at)
            self._client.hset(self._k_drains, project_id, orjson.dumps(current))

        self._run("record a drain heartbeat", beat)

    def _apply_outbox_expiry(self) -> None:
        """Give every unsent row's outbox keys the expiry replication calls for (OUTBOX_EXPIRY).

        Replicating: none, so a row outlives its thread until the plane has it. Not: its
        thread's, and the rows of a thread that already expired (kept only for the plane)
        are dropped with their index entries.
        """
        members: dict[str, list[str]] = {}

        def scan(_retry: bool) -> None:
            for key in (self._k_outbox, self._k_quarantine):
                for member, _score in self._client.zscan_iter(key, count=1000):
                    name = member.decode()
                    members.setdefault(_member_tag(member), []).append(name)

        self._run("read the outbox", scan)
        tags = sorted(members)
        for chunk in chunks(tags):
            dropped = self._eval_many(
                "set the outbox's expiry", "OUTBOX_EXPIRY", [(t, []) for t in chunk]
            )
            gone = [m for tag, d in zip(chunk, dropped, strict=True) if d for m in members[tag]]
            if gone:
                self._forget(
                    _IndexOps(outbox=dict.fromkeys(gone, 0.0), quarantine=dict.fromkeys(gone, 0.0)),
                    {_member_tag(m.encode()) for m in gone},
                )

    # ---- analysis reads

    def _analysis_threads(self, thread_id: str | None) -> Iterator[tuple[dict[str, bytes], Any]]:
        """Each thread's ledger fields and ANALYSIS_THREAD answer: tags by ZSCAN, scripts pipelined."""
        if thread_id is not None:
            tags = [thread_tag(thread_id)]
        else:
            tags = self._run(
                "list threads",
                lambda _r: [
                    m.decode() for m, _ in self._client.zscan_iter(self._k_threads, count=1000)
                ],
            )
        for batch in chunks(tags):
            raw = self._eval_many(
                "read thread columns", "ANALYSIS_THREAD", [(t, []) for t in batch], write=False
            )
            for answer in raw:
                fields = _pairs(answer[0])
                if "id" in fields and (thread_id is None or fields["id"].decode() == thread_id):
                    yield fields, answer

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for _fields, answer in self._analysis_threads(thread_id):
                pending, synced = _pairs(answer[2]), _pairs(answer[3])
                heads = answer[1]
                for j in range(0, len(heads), 2):
                    seq = heads[j].decode()
                    head = dict(zip(_SCALARS, orjson.loads(heads[j + 1]), strict=False))
                    if "h" + seq in pending:
                        reason = pending.get("q" + seq)
                        state: tuple[bool | None, str | None] = (
                            reason is not None,
                            None if reason is None else reason.decode(),
                        )
                    else:
                        state = (True, None) if "h" + seq in synced else (None, None)
                    yield (
                        head["thread_id"],
                        head["namespace"],
                        head["run_id"],
                        head["checkpoint_id"],
                        int(seq),
                        head["node_id"],
                        head["step"],
                        head["step_type"],
                        head["status"],
                        head["created_at"],
                        head["size_bytes"],
                        *state,
                        head["runner"],
                    )

        return column_chunks(CHECKPOINT_COLUMNS, rows(), chunk_size)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        status, run_id, created = (_SCALARS.index(n) for n in ("status", "run_id", "created_at"))

        def rows() -> Iterator[tuple[Any, ...]]:
            for fields, answer in self._analysis_threads(None):
                heads = answer[1]
                points = []
                for j in range(0, len(heads), 2):
                    head = orjson.loads(heads[j + 1])
                    points.append((int(heads[j]), head[created], head[status], head[run_id]))
                yield thread_row(_record(fields, len(points)), points)

        return column_chunks(THREAD_COLUMNS, rows(), chunk_size)


# ---------------------------------------------------------------------------- helpers


class _IndexOps:
    """Entries for the cross-slot indexes: member → score, one dict per index."""

    def __init__(self, **entries: dict[str, float]) -> None:
        self.threads: dict[str, float] = entries.get("threads", {})
        self.finished: dict[str, float] = entries.get("finished", {})
        self.parks: dict[str, float] = entries.get("parks", {})
        self.outbox: dict[str, float] = entries.get("outbox", {})
        self.quarantine: dict[str, float] = entries.get("quarantine", {})

    @property
    def empty(self) -> bool:
        return not (self.threads or self.finished or self.parks or self.outbox or self.quarantine)

    def indexes(self) -> tuple[dict[str, float], ...]:
        """The five dicts, in the order the INDEX script numbers its keys."""
        return (self.threads, self.finished, self.parks, self.outbox, self.quarantine)

    def members(self) -> Iterator[str]:
        for entries in self.indexes():
            yield from entries


class _ThreadIndex:
    """What a thread's own keys say its index entries should be."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.exists = False
        self.due: int | None = None
        self.park_deadline: int | None = None
        self.pending: list[tuple[int, int, bool]] = []  # seq, write time, quarantined

    @classmethod
    def parse(cls, tag: str, raw: list[Any]) -> _ThreadIndex:
        state = cls(tag)
        exists, finished_at, due, deadline, claimed, pending = raw
        state.exists = bool(exists)
        if finished_at is not None and due is not None:
            state.due = int(due)
        if deadline is not None and claimed is None:
            state.park_deadline = int(deadline)
        for j in range(0, len(pending), 3):
            state.pending.append(
                (int(pending[j]), _header_time(pending[j + 1]), bool(pending[j + 2]))
            )
        return state

    def entries(self, ops: _IndexOps) -> None:
        if self.exists:
            ops.threads[self.tag] = 0
            if self.due is not None:
                ops.finished[self.tag] = self.due
            if self.park_deadline is not None:
                ops.parks[self.tag] = self.park_deadline
        for seq, written, quarantined in self.pending:
            (ops.quarantine if quarantined else ops.outbox)[_member(self.tag, seq)] = written


def _member(tag: str, seq: int) -> str:
    return f"{tag}:{seq:020d}"


def _member_tag(member: bytes) -> str:
    return member.decode().partition(":")[0]


def _member_seq(member: str) -> int:
    return int(member.partition(":")[2])


def _pairs(flat: Sequence[bytes]) -> dict[str, bytes]:
    return {flat[j].decode(): flat[j + 1] for j in range(0, len(flat), 2)}


_TEXTS = (
    "state",
    "node_input",
    "node_output",
    "iteration_counters",
    "interrupt_context",
    "metadata",
)
_SCALARS = (
    "thread_id",
    "namespace",
    "checkpoint_id",
    "run_id",
    "parent_checkpoint_id",
    "runner",
    "agent_id",
    "agent_path",
    "node_id",
    "step",
    "step_type",
    "status",
    "iteration",
    "interrupt_reason",
    "created_at",
    "project_id",
    "size_bytes",
)
_CREATED = _SCALARS.index("created_at")


def _doc(row: EncodedCheckpoint) -> bytes:
    """A checkpoint document: a JSON header line of the scalar fields, then the payload texts.

    The texts (codec output, already JSON) follow the header unescaped; the header ends with
    their lengths. Everything needed to send the checkpoint is in the document.
    """
    texts = [getattr(row, name) for name in _TEXTS]
    head: list[Any] = [getattr(row, name) for name in _SCALARS]
    head[_CREATED] = to_micros(row.created_at)
    head.append([len(t) for t in texts])
    try:
        header = orjson.dumps(head)
    except orjson.JSONEncodeError as exc:
        raise StoreError(f"cannot put checkpoint {row.checkpoint_id[:80]!r}: {exc}") from exc
    return header + b"\n" + "".join(texts).encode("utf-8")


def _undoc(data: bytes, seq: int) -> EncodedCheckpoint:
    cut = data.index(b"\n")
    head = orjson.loads(data[:cut])
    body = data[cut + 1 :].decode("utf-8")
    lengths = head.pop()
    texts, pos = [], 0
    for length in lengths:
        texts.append(body[pos : pos + length])
        pos += length
    values: dict[str, Any] = dict(zip(_SCALARS, head, strict=True))
    values.update(zip(_TEXTS, texts, strict=True))
    values["created_at"] = from_micros(values["created_at"])
    return EncodedCheckpoint(**values, seq=seq)


def _hit(hit: Any) -> EncodedCheckpoint | None:
    if not hit or hit[1] is None:
        return None
    return _undoc(hit[1], int(hit[0]))


def _row_args(row: EncodedCheckpoint, doc: bytes) -> list[Any]:
    created = to_micros(row.created_at)
    header = orjson.dumps(
        {
            "th": row.thread_id,
            "c": row.checkpoint_id,
            "ns": row.namespace,
            "p": row.project_id,
            "at": str(created),
            "b": row.size_bytes,
            "st": row.step_type,
        }
    )
    return [row.namespace, row.checkpoint_id, doc, row.size_bytes, created, header]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _header_time(header: bytes) -> int:
    return int(orjson.loads(header)["t"])


def _entries(fields: dict[str, bytes], *, synced: bool) -> list[tuple[int, OutboxEntry]]:
    found = []
    for name, header in fields.items():
        if not name.startswith("h"):
            continue
        seq = name[1:]
        head = orjson.loads(header)
        reason = fields.get("q" + seq)
        synced_at = fields.get("z" + seq)
        error = fields.get("e" + seq)
        entry = OutboxEntry(
            thread_id=head["th"],
            checkpoint_id=head["c"],
            namespace=head["ns"],
            seq=int(seq),
            project_id=head["p"],
            created_at=from_micros(int(head["at"])),
            size_bytes=head["b"],
            synced=synced or reason is not None,
            sync_error=reason.decode() if reason is not None else None,
            attempts=int(fields.get("a" + seq, b"0")),
            last_error=error.decode() if error is not None else None,
            synced_at=from_micros(int(synced_at)) if synced_at is not None else None,
            step_type=head["st"],
        )
        found.append((int(head["t"]), entry))
    return found


def _write_doc(w: EncodedWrite) -> bytes:
    return (
        orjson.dumps([w.channel, w.task_path, w.task_id, w.idx]) + b"\n" + w.value.encode("utf-8")
    )


def _unwrite(doc: bytes, thread_id: str, namespace: str, checkpoint_id: str) -> EncodedWrite:
    cut = doc.index(b"\n")
    channel, task_path, task_id, idx = orjson.loads(doc[:cut])
    return EncodedWrite(
        thread_id=thread_id,
        namespace=namespace,
        checkpoint_id=checkpoint_id,
        task_id=task_id,
        idx=idx,
        channel=channel,
        value=doc[cut + 1 :].decode("utf-8"),
        task_path=task_path,
    )


def _park_doc(park: Park) -> bytes:
    return orjson.dumps(
        {
            "thread_id": park.thread_id,
            "run_id": park.run_id,
            "checkpoint_id": park.checkpoint_id,
            "node_id": park.node_id,
            "runner": park.runner,
            "reason": park.reason,
            "context": codec.dumps(park.context, path="park.context"),
            "deadline": str(to_micros(park.deadline)),
            "created_at": None if park.created_at is None else str(to_micros(park.created_at)),
            "deadline_source": park.deadline_source,
        }
    )


def _park(doc: bytes) -> Park:
    data = orjson.loads(doc)
    return Park(
        thread_id=data["thread_id"],
        run_id=data["run_id"],
        checkpoint_id=data["checkpoint_id"],
        node_id=data["node_id"],
        runner=data["runner"],
        reason=data["reason"],
        context=codec.loads(data["context"], path="park.context"),
        deadline=from_micros(int(data["deadline"])),
        created_at=None if data["created_at"] is None else from_micros(int(data["created_at"])),
        deadline_source=data["deadline_source"],
    )


def _lease(thread_id: str, raw: Sequence[bytes]) -> Lease:
    holder, run_id, acquired, expires = (v.decode() for v in raw)
    return Lease(
        thread_id=thread_id,
        holder=holder,
        run_id=run_id,
        acquired_at=from_micros(int(acquired)) if acquired else None,
        expires_at=from_micros(int(expires)),
    )


def _time(value: bytes | None) -> datetime | None:
    return None if value is None else from_micros(int(value))


def _delta(value: bytes | None) -> timedelta | None:
    return None if value is None else timedelta(microseconds=int(value))


def _record(fields: dict[str, bytes], checkpoints: int) -> ThreadRecord:
    thread_id = fields["id"].decode()
    lease = None
    if "lh" in fields:
        lease = _lease(
            thread_id, [fields["lh"], fields.get("lr", b""), fields.get("la", b""), fields["le"]]
        )
    last = fields.get("last")

    def text(name: str) -> str | None:
        value = fields.get(name)
        return None if value is None else value.decode()

    return ThreadRecord(
        thread_id=thread_id,
        owner=text("ow"),
        run_id=text("ri"),
        started_at=_time(fields.get("st")),
        declared_waiting=_delta(fields.get("dw")),
        declared_finished=_delta(fields.get("df")),
        finished_at=_time(fields.get("fa")),
        due_at=_time(fields.get("da")),
        lease=lease,
        checkpoints=checkpoints,
        size_bytes=int(fields.get("size", b"0")),
        newest_at=_time(fields.get("na")),
        newest_seq=int(last) if last is not None else None,
    )
