"""A LangGraph checkpoint store, read in place: ``langgraph+sqlite:///checkpoints.db`` (written
by ``SqliteSaver``) or ``langgraph+postgresql://user@host/db[?schema=name]`` (``PostgresSaver``).

Each checkpoint maps onto the model exactly as :class:`durability.langgraph.DurabilitySaver`
writes one (the table is in :mod:`durability.langgraph`), so a notebook shows a thread the same
whichever of them holds it: ``state`` is the channel values, LangGraph's metadata is the
metadata, its bookkeeping sits under ``metadata["__langgraph__"]``, ``node_id`` names the nodes
that ran, and a checkpoint with an ``__interrupt__`` write and no ``__resume__`` write is
``interrupted``. A LangGraph interrupt is a waiting thread, not a park: ``parks()`` is empty.
Pending writes are the ``writes`` / ``checkpoint_writes`` rows.

``seq``: SQLite's ``rowid`` (write order). Postgres keeps no write order, so ``seq`` ranks
checkpoints by id (UUIDv6, time-ordered), then thread and namespace. ``size_bytes`` counts the
stored checkpoint, metadata and (Postgres) the channel blobs it references.

Values are decoded with LangGraph's own ``JsonPlusSerializer`` in its strict mode (only its
built-in safe types are constructed; nothing else is imported). Nothing is guessed: a value
holding a type that strict mode blocks is kept as LangGraph's raw fallback and its path is
listed in ``metadata["unrevivable"]`` — ``[{"path": "state.customer", "types":
["myapp.models.Customer"]}]`` — and a blob it cannot read at all (encrypted, pickled, or
LangGraph not installed) is kept as a :class:`~durability.model.TypedValue` of its stored
bytes, listed the same way with a ``reason``. A pending write that cannot be revived is kept as
a ``TypedValue`` too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection as SAConnection

from durability._util import redact_url
from durability.errors import ConfigError, ReadOnlyStoreError, StoreError, StoreUnavailable
from durability.model import Deleted, PendingWrite, ThreadRecord, TypedValue
from durability.stores.base import Capabilities, Store, ThreadPage
from durability.stores.foreign.base import ForeignStore, Row, WrittenRow
from durability.stores.foreign.langgraph_map import (
    INTERRUPT,
    RESUME,
    interrupt_fields,
    node_of,
    to_checkpoint,
)
from durability.stores.foreign.langgraph_retention import (
    LangGraphScans,
    SQLiteWriter,
    delete_checkpoints,
)
from durability.stores.foreign.langgraph_sidecar import (
    SidecarLedger,
    sidecar_exists,
    sidecar_url,
    with_ledger,
)
from durability.stores.rows import CheckpointKey, Select

_BLOCKED = ("msgpack_blocked", "msgpack_method_blocked")


class _Unrevived:
    """Where strict decoding blocked a type: the raw fallback and the types it blocked."""

    __slots__ = ("types", "value")

    def __init__(self, value: Any, types: list[str]) -> None:
        self.value, self.types = value, types


class StrictDecoder:
    """LangGraph's serializer in strict mode, reporting what it could not revive."""

    _frames = threading.local()
    _listening = False
    _listen_lock = threading.Lock()

    def __init__(self) -> None:
        from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        with StrictDecoder._listen_lock:
            if not StrictDecoder._listening:
                register_serde_event_listener(StrictDecoder._heard)
                StrictDecoder._listening = True
        strict = JsonPlusSerializer(allowed_msgpack_modules=None)
        # LangGraph's strict hook decodes nested values itself; wrapping its outermost calls
        # attributes every block to the top-level value that holds it.
        inner: Callable[[int, bytes], Any] = strict._unpack_ext_hook
        self._serde = JsonPlusSerializer(
            allowed_msgpack_modules=None, __unpack_ext_hook__=self._hook(inner)
        )

    @staticmethod
    def _heard(event: Any) -> None:
        stack = getattr(StrictDecoder._frames, "stack", None)
        if stack and event.get("kind") in _BLOCKED:
            stack[-1].append(f"{event.get('module')}.{event.get('name')}")

    @staticmethod
    def _hook(inner: Callable[[int, bytes], Any]) -> Callable[[int, bytes], Any]:
        def hook(code: int, data: bytes) -> Any:
            stack = StrictDecoder._frames.__dict__.setdefault("stack", [])
            stack.append([])
            try:
                value = inner(code, data)
            finally:
                blocked = stack.pop()
            return _Unrevived(value, blocked) if blocked else value

        return hook

    def loads(self, kind: str, data: bytes) -> tuple[Any, list[tuple[str, list[str]]]]:
        """The value and ``(path, blocked types)`` for each part strict mode would not revive."""
        value = self._serde.loads_typed((kind, data))
        problems: list[tuple[str, list[str]]] = []
        return _unwrap(value, "", problems), problems


def _unwrap(value: Any, path: str, problems: list[tuple[str, list[str]]]) -> Any:
    if isinstance(value, _Unrevived):
        problems.append((path, value.types))
        return _unwrap(value.value, path, problems)
    if type(value) is dict:
        return {
            k: _unwrap(
                v,
                f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]",
                problems,
            )
            for k, v in value.items()
        }
    if type(value) is list:
        return [_unwrap(v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def _strict_decoder() -> StrictDecoder | None:
    try:
        return StrictDecoder()
    except ImportError:
        return None


class LangGraphStore(ForeignStore):
    """A LangGraph ``SqliteSaver`` file or ``PostgresSaver`` database, read in place.

    Read-only unless opened with ``?writable=true`` (or ``writable=True``): then the sweep may
    delete its threads and the ledger (kept in a sidecar store, ``?ledger=URL`` or the default
    of :func:`~durability.stores.foreign.langgraph_retention.sidecar_url`) records marks. Its
    tables are never altered (see :mod:`durability.stores.foreign.langgraph_retention`).
    """

    source = "langgraph"
    url_option_names = ("writable", "ledger")

    def __init__(
        self, url: str, *, writable: bool | None = None, ledger: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(url, **kwargs)
        flag = self.url_options.get("writable", "false").lower()
        if flag not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(
                f"cannot open {redact_url(url)}: writable={flag!r} must be true or false"
            )
        self.writable = bool(writable) if writable is not None else flag in ("true", "1", "yes")
        self.sidecar_url = sidecar_url(self, ledger or self.url_options.get("ledger"))
        self._sidecar: Store | None = None
        self._schema_known = False
        self._sidecar_lock = threading.Lock()
        self._writer = (
            SQLiteWriter(str(self.path), timeout=30.0) if self.dialect == "sqlite" else None
        )
        # Idle threads are swept here (nothing else expires them); Postgres is shared by workers.
        self.capabilities = Capabilities(shared=self.dialect == "postgres", sweeps_waiting=True)
        self.ledger = SidecarLedger(self)
        self.scans = LangGraphScans(self)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._sidecar is not None:
            self._sidecar.close()
        super().close()

    def refuse(self, action: str) -> ReadOnlyStoreError:
        """The refusal of a write on a store not opened writable."""
        return ReadOnlyStoreError(
            f"cannot {action}: the langgraph store {redact_url(self.url)} is opened read-only "
            "(a store another tool owns is written only when asked); open it with "
            "?writable=true (or writable=True) to sweep it in place, or copy its threads into a "
            "durability store"
        )

    def sidecar(self, *, create: bool) -> Store | None:
        """The durability store keeping this store's ledger; ``None`` when it does not exist
        and ``create`` is false (a read-only store never creates it)."""
        with self._sidecar_lock:
            if self._sidecar is None:
                if not create and not sidecar_exists(self):
                    return None
                from durability.stores import open_store

                side = open_store(self.sidecar_url, settings=self.settings, clock=self.clock)
                side.ready()
                self._sidecar = side
            return self._sidecar

    @contextmanager
    def writer(self, action: str) -> Iterator[Any]:
        """One write transaction on the LangGraph database (a DBAPI connection on SQLite)."""
        if not self.writable:
            raise self.refuse(action)
        if self._writer is not None:
            with self._writer.transaction(lambda exc: self._write_error(action, exc)) as conn:
                yield conn
            return
        try:
            with self.engine.connect() as conn, conn.begin():
                yield conn
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
            raise StoreUnavailable(self._write_error(action, exc).args[0]) from exc
        except sa_exc.DBAPIError as exc:
            raise self._write_error(action, exc) from exc

    def _write_error(self, action: str, exc: BaseException) -> StoreError:
        text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return StoreError(
            f"cannot {action} in the langgraph store {redact_url(self.url)}: "
            f"{text[0][:300] if text else type(exc).__name__}; nothing of this transaction "
            "was deleted"
        )

    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        """Delete a thread, or some of its checkpoints, when opened writable (else refused)."""
        if not self.writable:
            raise self.refuse("delete a thread" if keys is None else "delete checkpoints")
        if keys is None:
            return self.scans.delete_threads([thread_id])[thread_id]
        found = delete_checkpoints(self, [(thread_id, ns, cid) for ns, cid in keys])
        return found.get(thread_id, Deleted())

    def _setup(self) -> None:
        with self.read("read the LangGraph schema") as conn:
            if self.dialect == "sqlite":
                self.require_tables(conn, "checkpoints", "writes")
            else:
                self.require_tables(conn, "checkpoints", "checkpoint_blobs", "checkpoint_writes")
        self._decoder = _strict_decoder()

    # ------------------------------------------------------------------ decoding

    def _value(
        self, kind: str | None, data: bytes | None, path: str, problems: list[dict[str, Any]]
    ) -> Any:
        """One stored value, decoded strictly; what cannot be revived is listed in ``problems``."""
        raw = TypedValue(kind or "", bytes(data or b""))
        if self._decoder is None:
            problems.append({"path": path, "reason": "langgraph-checkpoint is not installed"})
            return raw
        try:
            value, blocked = self._decoder.loads(kind or "", bytes(data or b""))
        except Exception as exc:  # an encrypted, pickled or damaged blob: keep its bytes
            problems.append({"path": path, "reason": f"{type(exc).__name__}: {str(exc)[:120]}"})
            return raw
        for where, types in blocked:
            problems.append({"path": path + where, "types": types})
        return value

    # ------------------------------------------------------------------ raw rows

    def _raw(self, where: str, params: dict[str, Any], order: str, limit: int | None) -> list[Any]:
        """Checkpoint rows with ``seq`` and ``size_bytes``, as ``(row, checkpoint dict, metadata)``."""
        self.ready()
        if self.dialect == "sqlite":
            base = (
                "SELECT rowid AS seq, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
                "type, checkpoint, metadata, coalesce(length(checkpoint), 0) + "
                "coalesce(length(CAST(metadata AS BLOB)), 0) AS size_bytes FROM checkpoints"
            )
        else:
            base = (
                'SELECT row_number() OVER (ORDER BY checkpoint_id COLLATE "C", thread_id, '  # noqa: S608
                "checkpoint_ns) AS seq, thread_id, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, type, checkpoint, metadata, octet_length(checkpoint::text) + "
                f"octet_length(metadata::text) AS size_bytes FROM {self.table('checkpoints')}"
            )
        sql = f"SELECT * FROM ({base}) AS c" + (f" WHERE {where}" if where else "")  # noqa: S608
        sql += f" ORDER BY {order}" + (" LIMIT :limit" if limit is not None else "")
        with self.read("read checkpoints") as conn:
            rows = list(conn.execute(sa.text(sql), {**params, "limit": limit}))
            return self._mapped(conn, rows)

    def _mapped(self, conn: SAConnection, rows: Sequence[Any]) -> list[Row]:
        """Map rows onto the model: values, interrupt status, and node_id from each parent."""
        decoded = [self._checkpoint(conn, r) for r in rows]
        seen = {
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id): d[0].get("versions_seen") or {}
            for r, d in zip(rows, decoded, strict=True)
        }
        missing = {
            (r.thread_id, r.checkpoint_ns, r.parent_checkpoint_id)
            for r in rows
            if r.parent_checkpoint_id
        } - set(seen)
        seen.update(self._seen_of(conn, missing))
        interrupts = self._interrupts(
            conn, [(r.thread_id, r.checkpoint_ns, r.checkpoint_id) for r in rows]
        )
        mapped = []
        for r, (checkpoint, metadata, state, problems, extra_size) in zip(
            rows, decoded, strict=True
        ):
            key = (r.thread_id, r.checkpoint_ns, r.checkpoint_id)
            mapped.append(
                Row(
                    to_checkpoint(
                        thread_id=r.thread_id,
                        namespace=r.checkpoint_ns,
                        parent=r.parent_checkpoint_id,
                        checkpoint=checkpoint,
                        metadata=metadata,
                        state=state,
                        parent_seen=seen.get(
                            (r.thread_id, r.checkpoint_ns, r.parent_checkpoint_id), {}
                        ),
                        interrupt=interrupts.get(key),
                        extra_metadata={"unrevivable": problems} if problems else None,
                        seq=int(r.seq),
                        size_bytes=int(r.size_bytes or 0) + extra_size,
                    )
                )
            )
        return mapped

    def _checkpoint(
        self, conn: SAConnection, r: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[dict[str, Any]], int]:
        problems: list[dict[str, Any]] = []
        metadata = (
            r.metadata if isinstance(r.metadata, dict) else json.loads(bytes(r.metadata or b"{}"))
        )
        if self.dialect == "sqlite":
            checkpoint = self._value(r.type, r.checkpoint, "checkpoint", problems)
            if not isinstance(checkpoint, dict):
                return {"id": r.checkpoint_id}, metadata, {}, problems, 0
            values = checkpoint.get("channel_values") or {}
            for p in problems:  # paths inside the channel values read as state paths
                p["path"] = p["path"].replace("checkpoint.channel_values", "state", 1)
            extra = 0
        else:
            checkpoint = dict(r.checkpoint)
            values = dict(checkpoint.get("channel_values") or {})
            blobs = self._blobs(
                conn, r.thread_id, r.checkpoint_ns, checkpoint.get("channel_versions") or {}
            )
            extra = sum(len(b.blob or b"") for b in blobs)
            for b in blobs:
                if b.type != "empty":
                    values[b.channel] = self._value(b.type, b.blob, f"state.{b.channel}", problems)
        versions = checkpoint.get("channel_versions") or {}
        state = {k: v for k, v in values.items() if k in versions}
        return checkpoint, metadata, state, problems, extra

    def _blobs(
        self, conn: SAConnection, thread_id: str, namespace: str, versions: dict[str, Any]
    ) -> list[Any]:
        if not versions:
            return []
        sql = (
            f"SELECT channel, version, type, blob FROM {self.table('checkpoint_blobs')} "  # noqa: S608
            "WHERE thread_id = :t AND checkpoint_ns = :ns AND channel = ANY(:channels)"
        )
        rows = conn.execute(
            sa.text(sql), {"t": thread_id, "ns": namespace, "channels": list(versions)}
        )
        return [b for b in rows if str(versions.get(b.channel)) == b.version]

    def _seen_of(
        self, conn: SAConnection, keys: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Any]:
        """``versions_seen`` of checkpoints outside the batch (the parents of its first rows)."""
        found: dict[tuple[str, str, str], Any] = {}
        for thread_id, namespace, checkpoint_id in keys:
            table = "checkpoints" if self.dialect == "sqlite" else self.table("checkpoints")
            r = conn.execute(
                sa.text(
                    f"SELECT type, checkpoint FROM {table} WHERE thread_id = :t AND checkpoint_ns = :ns AND checkpoint_id = :c"  # noqa: S608
                ),
                {"t": thread_id, "ns": namespace, "c": checkpoint_id},
            ).first()
            if r is None:
                continue
            if self.dialect == "postgres":
                checkpoint = r.checkpoint
            else:
                checkpoint = self._value(r.type, r.checkpoint, "parent", [])
            if isinstance(checkpoint, dict):
                found[(thread_id, namespace, checkpoint_id)] = checkpoint.get("versions_seen") or {}
        return found

    def _interrupts(
        self, conn: SAConnection, keys: list[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], tuple[str, Any]]:
        """Interrupt fields of the checkpoints with an ``__interrupt__`` write and no ``__resume__``."""
        by_key: dict[tuple[str, str, str], list[Any]] = {}
        for thread_id in {k[0] for k in keys}:
            for r in self._write_rows(
                conn,
                "thread_id = :t AND channel IN (:i, :r)",
                {"t": thread_id, "i": INTERRUPT, "r": RESUME},
            ):
                by_key.setdefault((r.thread_id, r.checkpoint_ns, r.checkpoint_id), []).append(r)
        found = {}
        for key in keys:
            rows = by_key.get(key, [])
            if rows and not any(r.channel == RESUME for r in rows):
                first = rows[0]
                values = [self._value(r.type, r.value, "interrupt", []) for r in rows]
                found[key] = interrupt_fields(values, node_of(first.task_path), first.task_id)
        return found

    def _write_rows(self, conn: SAConnection, where: str, params: dict[str, Any]) -> list[Any]:
        if self.dialect == "sqlite":
            sql = f"SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value FROM writes WHERE {where} ORDER BY rowid"  # noqa: S608
        else:
            sql = (
                "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, "  # noqa: S608
                f"blob AS value FROM {self.table('checkpoint_writes')} WHERE {where} ORDER BY task_path, task_id, idx"
            )
        return list(conn.execute(sa.text(sql), params))

    # ------------------------------------------------------------------ the contract's reads

    def _has_any_checkpoint(self) -> bool:
        return bool(self._raw("", {}, "seq", 1))

    def _select(self, query: Select) -> list[Row]:
        clause = self.select_clause(query, thread="thread_id", namespace="checkpoint_ns")
        assert clause is not None  # the source has namespaces: every query has a clause
        where, params, order = clause
        return self._raw(where, params, order, query.limit)

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[WrittenRow]]:
        self.ready()
        where = "thread_id = :t AND checkpoint_ns = :ns AND checkpoint_id = :c"
        with self.read("read pending writes") as conn:
            return {
                (ns, cid): [
                    WrittenRow(self._write(r))
                    for r in self._write_rows(conn, where, {"t": thread_id, "ns": ns, "c": cid})
                ]
                for ns, cid in keys
            }

    def _write(self, r: Any) -> PendingWrite:
        problems: list[dict[str, Any]] = []
        value = self._value(r.type, r.value, "value", problems)
        if problems:
            value = TypedValue(r.type or "", bytes(r.value or b""))
        return PendingWrite(
            thread_id=r.thread_id,
            namespace=r.checkpoint_ns,
            checkpoint_id=r.checkpoint_id,
            task_id=r.task_id,
            idx=int(r.idx),
            channel=r.channel,
            value=value,
            task_path=r.task_path or "",
        )

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        records = self._records(
            "thread_id > :cursor" if cursor is not None else "", {"cursor": cursor}, limit
        )
        return ThreadPage(records, records[-1].thread_id if len(records) == limit else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        records = self._records("thread_id = :t", {"t": thread_id}, 1)
        if records:
            return records[0]
        side = self.sidecar(create=False)
        return side.thread(thread_id) if side is not None else None

    def _records(self, where: str, params: dict[str, Any], limit: int) -> list[ThreadRecord]:
        self.ready()
        table = "checkpoints" if self.dialect == "sqlite" else self.table("checkpoints")
        size = (
            "coalesce(length(checkpoint), 0) + coalesce(length(CAST(metadata AS BLOB)), 0)"
            if self.dialect == "sqlite"
            else "octet_length(checkpoint::text) + octet_length(metadata::text)"
        )
        newest = "max(rowid)" if self.dialect == "sqlite" else "NULL"
        sql = (
            f"SELECT thread_id, count(*) AS n, sum({size}) AS size, {newest} AS newest_seq FROM {table}"  # noqa: S608
            + (f" WHERE {where}" if where else "")
            + " GROUP BY thread_id ORDER BY thread_id LIMIT :limit"
        )
        with self.read("list threads") as conn:
            rows = list(conn.execute(sa.text(sql), {**params, "limit": limit}))
            blobs: dict[str, int] = {}
            if self.dialect == "postgres" and rows:
                # A channel blob is shared by the checkpoints that reference it: counted once.
                blobs = dict(
                    conn.execute(
                        sa.text(
                            "SELECT thread_id, coalesce(sum(octet_length(blob)), 0) FROM "  # noqa: S608
                            f"{self.table('checkpoint_blobs')} WHERE thread_id = ANY(:threads) GROUP BY thread_id"
                        ),
                        {"threads": [r.thread_id for r in rows]},
                    ).all()
                )
        records = []
        for r in rows:
            found = self._select(Select(r.thread_id, None, order="seq_desc", limit=1))
            latest = found[0] if found else None
            newest_at = latest.checkpoint.created_at if latest else None
            records.append(
                ThreadRecord(
                    thread_id=r.thread_id,
                    checkpoints=int(r.n),
                    size_bytes=int(r.size or 0) + int(blobs.get(r.thread_id, 0)),
                    newest_at=newest_at,
                    newest_seq=int(r.newest_seq)
                    if r.newest_seq is not None
                    else (latest.checkpoint.seq if latest else None),
                )
            )
        side = self.sidecar(create=False) if records else None
        if side is not None:
            records = [with_ledger(r, side.thread(r.thread_id)) for r in records]
        return records


__all__ = ["LangGraphStore", "StrictDecoder"]
