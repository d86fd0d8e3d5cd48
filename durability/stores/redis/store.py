"""The Redis store (``redis://``, ``rediss://``): plain Redis 7, no modules, Cluster-ready.

Every write is one Lua script over the thread's slot (:mod:`durability.stores.redis.scripts`),
and each ends by setting the thread's waiting retention (declared in its ledger, else the
platform's) as the absolute expiry of all of the thread's keys: the thread expires whole, a
read never extends it. The outbox keys are the exception while the store replicates: an
unreplicated checkpoint keeps its outbox entry, with its whole document, until the plane has
it, even after the thread's other keys expire. Then the cross-slot indexes are brought in line
(:meth:`RedisStore.index`). The key layout is in :mod:`durability.stores.redis.keys`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durability._extras import needs_extra

with needs_extra("a Redis store"):  # the redis extra
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

from durability._util import redact_url
from durability.errors import (
    CheckpointConflict,
    CheckpointDeleteError,
    ConfigError,
    StoreError,
    StoreUnavailable,
)
from durability.model import Deleted, ThreadRecord
from durability.stores import rows
from durability.stores.base import Capabilities, Store, ThreadPage, conflict_message
from durability.stores.redis import documents as docs
from durability.stores.redis import reconcile
from durability.stores.redis.keys import (
    DEFAULT_PREFIX,
    PREFIX,
    GlobalKeys,
    IndexOps,
    member,
    thread_tag,
)
from durability.stores.redis.ledger import RedisLedger, RedisParks
from durability.stores.redis.outbox import RedisOutbox
from durability.stores.redis.scans import RedisScans
from durability.stores.redis.scripts import THREAD_KEYS, source
from durability.stores.redis.tombstones import RedisTombstones
from durability.stores.rows import CheckpointKey, EncodedCheckpoint, EncodedWrite, Select
from durability.stores.sealing import Reseal

T = TypeVar("T")

#: How long a connection failure is retried before the store reports itself unavailable.
_BACKOFF_S = (0.0, 0.05, 0.25, 1.0)
#: How long the cached "does this store replicate" answer is trusted.
_REPLICATING_TTL_S = 30.0


class RedisStore(Store):
    """Checkpoints in Redis 7 (no modules), one hash tag per thread.

    Options (keyword or URL query): ``prefix`` (key namespace, default ``durability:``;
    letters, digits and ``_ . : -``), ``client_name`` (shown by ``CLIENT LIST``, default
    ``durability``), ``cluster=True`` (talk to a Redis Cluster), ``delete_batch`` (checkpoints and
    writes one delete round removes, default 1000), ``reconcile`` (repair the cross-slot
    indexes when the store is first used, default on), ``client`` (an existing redis client).
    """

    provider = "redis"
    capabilities = Capabilities(shared=True, ttl=True, can_park=True)

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
        if not PREFIX.fullmatch(self.prefix):
            raise ConfigError(
                f"cannot open {redact_url(url)}: prefix {self.prefix!r} must be 1 to 100 letters, "
                "digits or _ . : - (no braces: they would move keys to another cluster slot)"
            )
        if delete_batch < 1:
            raise ConfigError(
                f"cannot open {redact_url(url)}: delete_batch={delete_batch} must be at least 1"
            )
        flag = ours.get("cluster", "").lower() in ("1", "true", "yes", "on")
        self.cluster = cluster if cluster is not None else flag
        self.client_name = client_name or ours.get("client_name") or "durability"
        self.delete_batch = delete_batch
        self._reconcile_on_start = reconcile
        self._client_obj = client
        self._client_lock = threading.Lock()
        self._scripts: dict[str, Any] = {}
        self._replicating = False
        self._replicating_at = float("-inf")
        self.keys = GlobalKeys.of(self.prefix)
        self.ledger = RedisLedger(self)
        self.parks = RedisParks(self)
        self.outbox = RedisOutbox(self)
        self.scans = RedisScans(self)
        self.tombstones: RedisTombstones = RedisTombstones(self)

    # ------------------------------------------------------------------ plumbing

    @property
    def client(self) -> Any:
        """The redis client, built on first use (a cluster client talks to the servers at once)."""
        if self._client_obj is None:
            with self._client_lock, self._errors("connect"):
                if self._client_obj is None:
                    options: dict[str, Any] = {
                        "retry": Retry(NoBackoff(), 0),  # retries are ours: see run
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
        """Driver errors → :mod:`durability.errors` (used by :meth:`run`, the one boundary)."""
        where = redact_url(self.url)
        try:
            yield
        except redis.ConnectionError as exc:  # redis-py's TimeoutError is one too
            raise StoreUnavailable(
                f"cannot {action}: the Redis server {where} is unavailable ({exc}); "
                "check that it is running and reachable, then retry"
            ) from exc
        except redis.TimeoutError as exc:
            raise StoreUnavailable(
                f"cannot {action}: the Redis server {where} did not answer in time "
                f"({exc}); check its load and network, then retry"
            ) from exc
        except redis.RedisError as exc:
            raise StoreError(
                f"cannot {action} in {where}: Redis refused it ({exc}); check the "
                f"server's log (memory limit, a read-only replica) and that nothing else writes "
                f"keys under the prefix {self.prefix!r}"
            ) from exc

    def run(self, action: str, call: Callable[[bool], T]) -> T:
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

    def script(self, name: str) -> Any:
        """The registered script ``name`` (see :mod:`durability.stores.redis.scripts`)."""
        found = self._scripts.get(name)
        if found is None:
            found = self._scripts[name] = self.client.register_script(source(name))
        return found

    @property
    def index_in_script(self) -> bool:
        """A single server lets a put's script write the cross-slot index entries too."""
        return not self.cluster

    def thread_keys(self, tag: str) -> list[str]:
        """The keys of the thread tagged ``tag``, in the order every script receives them."""
        base = f"{self.prefix}{{{tag}}}:"
        return [base + k for k in THREAD_KEYS]

    def _write_args(self, retry: bool) -> list[Any]:
        ttl_ms = self.settings.waiting_retention // timedelta(milliseconds=1)
        return [ttl_ms, "1" if self.store_replicates() else "0", "1" if retry else "0"]

    def eval(
        self,
        action: str,
        name: str,
        tag: str,
        args: Sequence[Any],
        *,
        write: bool = True,
        extra_keys: Sequence[str] = (),
    ) -> Any:
        """Run script ``name`` over the thread tagged ``tag`` (a write script gets the TTL args)."""
        keys = [*self.thread_keys(tag), *extra_keys]
        script = self.script(name)

        def call(retry: bool) -> Any:
            full = [*self._write_args(retry), *args] if write else list(args)
            return script(keys=keys, args=full)

        return self.run(action, call)

    def eval_many(
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
                self.eval(action, name, tag, args, write=write, extra_keys=extra_keys)
                for tag, args in calls
            ]
        script = self.script(name)

        def call(retry: bool) -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for tag, args in calls:
                full = [*self._write_args(retry), *args] if write else list(args)
                script(keys=[*self.thread_keys(tag), *extra_keys], args=full, client=pipe)
            return list(pipe.execute())

        return self.run(action, call)

    def index(
        self, action: str, *, add: IndexOps | None = None, remove: IndexOps | None = None
    ) -> None:
        """Step 2 of a write: bring the cross-slot indexes in line (idempotent)."""
        add, remove = add or IndexOps(), remove or IndexOps()
        if add.empty and remove.empty:
            return
        args: list[Any] = []
        for position, entries in enumerate(remove.indexes(), start=1):
            for name in entries:
                args += ["-", position, name]
        for position, entries in enumerate(add.indexes(), start=1):
            for name, score in entries.items():
                args += ["+", position, name, score]
        script = self.script("index")
        # One script on the indexes' slot: a single command, and atomic there.
        self.run(action, lambda _retry: script(keys=list(self.keys.indexes), args=args))

    def forget(self, remove: IndexOps, tags: Iterable[str]) -> None:
        """Drop index entries their threads do not support, then re-add what a racer wrote."""
        reconcile.forget(self, remove, tags)

    def store_replicates(self) -> bool:
        """Whether a connection is recorded (cached for a while: every write asks)."""
        if time.monotonic() - self._replicating_at > _REPLICATING_TTL_S:
            self.refresh_replicating()
        return self._replicating

    def refresh_replicating(self) -> None:
        """Read again whether a connection is recorded."""
        count = self.run("read connections", lambda _r: self.client.hlen(self.keys.connections))
        self._replicating = bool(count)
        self._replicating_at = time.monotonic()

    def scan_keys(self, suffix: str) -> Iterator[bytes]:
        """Every thread key of this store ending in ``suffix`` (a SCAN)."""
        return iter(self.client.scan_iter(match=f"{self.prefix}{{*}}{suffix}", count=1000))

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        self.refresh_replicating()
        if self._reconcile_on_start:
            self.reconcile()

    def reconcile(self) -> int:
        """Repair the cross-slot indexes from the threads' own keys; returns the threads seen.

        Runs when the store is first used (unless opened with ``reconcile=False``). One process
        at a time: one that finds another reconciling skips, the other repairs the same damage.
        """
        return reconcile.reconcile(self)

    def _read_generation(self) -> int | None:
        value = self.run("read the format generation", lambda _r: self.client.get(self.keys.format))
        return None if value is None else int(value)

    def _write_generation(self, generation: int) -> None:
        self.run(
            "record the format generation",
            lambda _r: self.client.set(self.keys.format, str(generation)),
        )

    def _has_any_checkpoint(self) -> bool:
        def call(_retry: bool) -> bool:
            return any(key.endswith(b":c") for key in self.scan_keys(":c"))

        return self.run("look for checkpoints", call)

    def _wipe(self) -> None:
        def call(_retry: bool) -> None:
            batch: list[bytes] = []
            for key in self.scan_keys("*"):
                if key.decode() == self.keys.erasure_secret:
                    continue  # kept: other handles on the store hold it already
                batch.append(key)
                if len(batch) >= 500:
                    self._unlink(batch)
            self._unlink(batch)

        self.run("reset the store", call)

    def _unlink(self, keys: list[bytes]) -> None:
        if keys:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.unlink(key)
            pipe.execute()
            keys.clear()

    # ------------------------------------------------------------------ checkpoints

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        groups: dict[str, list[int]] = {}
        for n, row in enumerate(rows):
            groups.setdefault(thread_tag(row.thread_id), []).append(n)
        documents = [docs.doc(row) for row in rows]
        if len(groups) > 1:
            # Atomic per thread (each thread is its own slot); refuse before writing any.
            self._check_unstored(rows, groups)
            for members in groups.values():
                self.tombstones.refuse(rows[members[0]].thread_id, "put checkpoints")
        calls = []
        for tag, members in groups.items():
            args: list[Any] = ["1" if synced else "0", rows[members[0]].thread_id, len(members)]
            for n in members:
                args += docs.row_args(rows[n], documents[n])
            calls.append((tag, args))
        # On one server the script indexes its rows itself; a cluster needs the second step.
        extra = [self.keys.threads, self.keys.outbox] if self.index_in_script else []
        results = self.eval_many("put a checkpoint", "put", calls, extra_keys=extra)
        seqs: list[int] = [0] * len(rows)
        add = IndexOps()
        for (tag, members), result in zip(groups.items(), results, strict=True):
            if result[0] == b"erased":
                raise self.tombstones.refusal(rows[members[0]].thread_id, "put a checkpoint")
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
                    add.outbox[member(tag, seqs[n])] = write_time
        if not self.index_in_script:
            self.index("index a checkpoint", add=add)
        return seqs

    def _check_unstored(self, rows: list[EncodedCheckpoint], groups: dict[str, list[int]]) -> None:
        calls = [
            (tag, [f"{rows[n].namespace}\0{rows[n].checkpoint_id}" for n in members])
            for tag, members in groups.items()
        ]
        found = self.eval_many("put checkpoints", "any_stored", calls, write=False)
        for (_tag, members), index in zip(groups.items(), found, strict=True):
            if index >= 0:
                row = rows[members[index]]
                raise CheckpointConflict(
                    f"one of {len(rows)} checkpoints was refused, nothing was written: "
                    + conflict_message(row.thread_id, row.namespace, row.checkpoint_id)
                )

    def _select(self, query: Select) -> list[EncodedCheckpoint]:
        tag, action = thread_tag(query.thread_id), query.action
        if query.checkpoint_id is not None and query.namespace is not None:
            found = docs.hit(
                self.eval(action, "get", tag, [query.namespace, query.checkpoint_id], write=False)
            )
            rows = [found] if found is not None and found.thread_id == query.thread_id else []
            return [r for r in rows if query.matches(r, r.seq)]
        if query.order == "id_desc":
            return self._by_id(query)
        if query.order == "seq_desc" and query.limit == 1 and query.after_seq is None:
            name, args = (
                ("latest", [query.namespace]) if query.namespace is not None else ("latest_any", [])
            )
            found = docs.hit(self.eval(action, name, tag, args, write=False))
            return [found] if found is not None and found.thread_id == query.thread_id else []
        # The script pages in write order; other filters and orders are applied here.
        plain = query.order == "seq" and query.checkpoint_id is None and query.before_id is None
        args = [
            "0" if query.namespace is None else "1",
            query.namespace or "",
            "" if query.after_seq is None else str(query.after_seq),
            str(query.limit) if plain and query.limit is not None else "-1",
        ]
        rows = docs.rows_of(self.eval(action, "history", tag, args, write=False), query.thread_id)
        rows = [r for r in rows if query.matches(r, r.seq)]
        if query.order == "seq_desc":
            rows.reverse()
        return rows if query.limit is None else rows[: query.limit]

    def _by_id(self, query: Select) -> list[EncodedCheckpoint]:
        """LangGraph's order: greatest checkpoint id first, from the thread's id index."""
        tag, action = thread_tag(query.thread_id), query.action
        if query.namespace is not None and query.checkpoint_id is None:
            limit = -1 if query.limit is None else query.limit
            args = [query.namespace, query.before_id or "", limit]
            flat = self.eval(action, "newest_first", tag, args, write=False)
            return docs.rows_of(flat, query.thread_id)
        keys = [key.decode() for key in self.eval(action, "all_ids", tag, [], write=False)]
        chosen = sorted(
            (
                k
                for k in keys
                if (query.before_id is None or k.partition("\0")[2] < query.before_id)
                and (query.checkpoint_id is None or k.partition("\0")[2] == query.checkpoint_id)
            ),
            key=lambda k: k.partition("\0")[2],
            reverse=True,
        )[: query.limit]
        flat = self.eval(action, "get_many", tag, chosen, write=False) if chosen else []
        return docs.rows_of(flat, query.thread_id)

    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        groups: dict[str, list[EncodedWrite]] = {}
        for w in rows:
            groups.setdefault(thread_tag(w.thread_id), []).append(w)
        calls = []
        for tag, writes in groups.items():
            args: list[Any] = [writes[0].thread_id, len(writes)]
            for w in writes:
                args += [w.namespace, w.checkpoint_id, w.task_id, str(w.idx), docs.write_doc(w)]
            calls.append((tag, args))
        results = self.eval_many("store pending writes", "put_writes", calls)
        for (_tag, args), result in zip(calls, results, strict=True):
            if result == b"erased":
                raise self.tombstones.refusal(str(args[0]), "store a pending write")
        self.index("index a thread", add=IndexOps(threads=dict.fromkeys(groups, 0)))

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[EncodedWrite]]:
        args = [part for key in keys for part in key]
        flat = self.eval(
            "read pending writes", "writes_of", thread_tag(thread_id), args, write=False
        )
        found: dict[CheckpointKey, list[EncodedWrite]] = {}
        pos = 0
        for namespace, checkpoint_id in keys:
            count = int(flat[pos])
            stored = flat[pos + 1 : pos + 1 + count]
            pos += 1 + count
            found[(namespace, checkpoint_id)] = [
                docs.unwrite(d, thread_id, namespace, checkpoint_id)
                for d in stored
                if d is not None
            ]
        return found

    def _reseal(self, changes: Sequence[Reseal]) -> None:
        action = "re-encrypt checkpoints"
        for change in changes:  # a document is replaced only if nobody changed it since read
            tag, key = thread_tag(change.thread_id), [change.namespace, change.checkpoint_id]
            found = self.eval(action, "get", tag, key, write=False)
            row = docs.hit(found)
            if row is None or row.thread_id != change.thread_id or row.state != change.old:
                continue
            row.state, row.size_bytes = change.new, row.size_bytes + change.delta
            self.eval(action, "set_doc", tag, [found[0], found[1], docs.doc(row), change.delta])

    def _set_status(self, address: rows.CheckpointAddress, change: rows.StatusChange) -> bool:
        thread_id, namespace, checkpoint_id = address
        tag, action = thread_tag(thread_id), "change a checkpoint's status"
        # Documents are written whole: read, change, and write back only if nobody changed it
        # in between (only another set_status on the same checkpoint can).
        for _attempt in range(20):
            found = self.eval(action, "get", tag, [namespace, checkpoint_id], write=False)
            row = docs.hit(found)
            if row is None or row.thread_id != thread_id:
                return False
            size = row.size_bytes
            row.apply(change)
            args = [found[0], found[1], docs.doc(row), row.size_bytes - size]
            if self.eval(action, "set_doc", tag, args):
                self.index("index a thread", add=IndexOps(threads={tag: 0}))
                return True
        raise StoreError(
            f"cannot change the status of checkpoint {checkpoint_id[:80]!r} in thread "
            f"{thread_id[:80]!r}: it kept changing under concurrent updates; retry"
        )

    # ------------------------------------------------------------------ threads

    def records(self, tags: Sequence[str]) -> list[ThreadRecord | None]:
        """The records of the threads tagged ``tags`` (``None`` where a thread is gone)."""
        raw = self.eval_many("look up a thread", "record", [(t, []) for t in tags], write=False)
        return [
            docs.record(docs.pairs(fields), int(count)) if fields else None for fields, count in raw
        ]

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        low = f"({cursor}" if cursor else "-"

        def page(_retry: bool) -> list[bytes]:
            return list(self.client.zrangebylex(self.keys.threads, low, "+", start=0, num=limit))

        tags = [t.decode() for t in self.run("list threads", page)]
        records = self.records(tags) if tags else []
        dangling = [t for t, r in zip(tags, records, strict=True) if r is None]
        if dangling:
            self.forget(IndexOps(threads=dict.fromkeys(dangling, 0)), dangling)
        found = [r for r in records if r is not None]
        return ThreadPage(found, tags[-1] if len(tags) == limit else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        record = self.records([thread_tag(thread_id)])[0]
        return record if record is not None and record.thread_id == thread_id else None

    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        tag = thread_tag(thread_id)
        if keys is not None:
            args = [part for key in keys for part in key]
            out = self.eval("delete checkpoints", "delete_checkpoints", tag, args)
            gone = IndexOps()
            for seq in out[2:]:
                gone.outbox[member(tag, int(seq))] = gone.quarantine[member(tag, int(seq))] = 0
            self.index("clean the indexes", remove=gone)
            return Deleted(checkpoints=int(out[0]), writes=int(out[1]))
        return self._delete_thread(thread_id, tag)

    def _delete_thread(self, thread_id: str, tag: str) -> Deleted:
        total, gone = Deleted(), IndexOps()
        previous: tuple[int, int] | None = None
        rounds = 0
        while True:
            rounds += 1
            out = self.eval("delete a thread", "delete_round", tag, [self.delete_batch])
            removed_cp, removed_w, left_cp, left_w, done = (int(v) for v in out[:5])
            total += Deleted(checkpoints=removed_cp, writes=removed_w)
            for seq in out[5:]:
                gone.outbox[member(tag, int(seq))] = gone.quarantine[member(tag, int(seq))] = 0
            if done:
                break
            # Fail at the first round, counting from the second, that leaves the thread holding
            # no fewer checkpoints and writes than the round before: a writer outpaces us.
            if previous is not None and left_cp >= previous[0] and left_w >= previous[1]:
                self.index("clean the indexes", remove=gone)
                raise CheckpointDeleteError(
                    f"cannot delete thread {thread_id[:80]!r} from {redact_url(self.url)}: round "
                    f"{rounds} left it holding {left_cp} checkpoints and {left_w} pending writes, "
                    f"no fewer than round {rounds - 1} did ({previous[0]} and {previous[1]}); a run is "
                    "still writing to it: stop that run (or let it park), then delete again"
                )
            previous = (left_cp, left_w)
        gone.threads[tag] = gone.finished[tag] = gone.parks[tag] = 0
        self.forget(gone, [tag])
        return total
