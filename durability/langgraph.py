"""LangGraph on durability: a checkpoint saver over any durability store.

:class:`DurabilitySaver` is a LangGraph ``BaseCheckpointSaver[str]`` with real sync and async
methods (the async ones run the sync ones on a worker thread, so they never block the event
loop), over memory, SQLite, Postgres, Redis or any store that keeps the contract::

    import durability
    from durability.langgraph import DurabilitySaver

    saver = DurabilitySaver(durability.open("postgresql+psycopg://localhost/app"))
    graph = builder.compile(checkpointer=saver)

How LangGraph maps onto the durability model
=============================================

Every LangGraph checkpoint is one ordinary :class:`~durability.model.Checkpoint`, so
retention, finished marks, the outbox, the sweep, frames and notebooks see LangGraph threads
like any other:

===========================  =====================================================================
durability field             from LangGraph
===========================  =====================================================================
``thread_id``                ``configurable.thread_id`` (``str()``-ed)
``namespace``                ``configurable.checkpoint_ns`` (``""`` for the root graph)
``checkpoint_id``            ``checkpoint["id"]`` (a UUIDv6 string)
``parent_checkpoint_id``     the ``checkpoint_id`` of the config given to ``put``
``run_id``                   ``metadata["run_id"]`` (``""`` when the caller passed none)
``step``                     ``metadata["step"]`` (-1 for the input checkpoint)
``node_id``                  the node(s) whose writes made this checkpoint, comma-separated and
                             sorted: those whose ``versions_seen`` moved since the parent
                             checkpoint (the nodes that ran; ``Send`` tasks leave no trace
                             there); ``__input__`` for an input checkpoint
``step_type``                ``"langgraph"``
``status``                   ``completed``; ``interrupted`` while an ``__interrupt__`` write
                             against it is pending, and ``completed`` again once a
                             ``__resume__`` write arrives (or, in the process that saw the
                             interrupt, a child checkpoint is put)
``interrupt_reason``         the interrupt's value when it is a string, else "waiting for input
                             in NODE"
``interrupt_context``        ``{"node", "task_id", "interrupts": [{"id", "value"}]}``
``created_at``               ``checkpoint["ts"]``
``state``                    the channel values, ``{channel: value}`` (only channels listed in
                             ``channel_versions``)
``metadata``                 LangGraph's metadata as stored by its own savers (``source``,
                             ``step``, ``parents``, ``run_id``, the config's primitive keys), plus
                             ``"__langgraph__"``: the checkpoint's bookkeeping (``v``, ``ts``,
                             ``channel_versions``, ``versions_seen``, ``updated_channels``, and
                             any other key LangGraph adds)
pending write                a :class:`~durability.model.PendingWrite` per ``(task_id, idx)``,
                             ``idx`` from LangGraph's special-channel map for ``__error__``,
                             ``__scheduled__``, ``__interrupt__``, ``__resume__`` (first write
                             wins for regular writes; special channels overwrite)
===========================  =====================================================================

A LangGraph interrupt is a *waiting thread* under the waiting horizon, not a park: it has no
deadline and holds no park record, so the sweep deletes it once it has been idle for the
waiting retention, like any open conversation.

Values
======

By default every channel value and pending write goes through durability's codec, so every
provider round-trips LangChain messages, LangGraph types (``Send``, ``Interrupt``,
``Command``…), datetimes, decimals, dataclasses and the rest, and refuses the same values
(NaN, unknown classes) at write, naming the path. LangGraph's ``serde`` is then not used for
values (``with_allowlist`` keeps working; the codec's own allowlist applies on read).

Pass ``serde=`` (an ``EncryptedSerializer``, a ``JsonPlusSerializer`` with pickle fallback…)
and each value is stored as that serializer's typed bytes, a
:class:`~durability.model.TypedValue`, and handed back to it on read: encrypted state stays
encrypted at rest and in the outbox. Metadata and bookkeeping stay readable either way, as in
LangGraph's own savers.

Beyond LangGraph's savers
=========================

``copy_thread``, ``prune`` (``keep_latest`` keeps the greatest id per namespace; threads using
a ``DeltaChannel`` are refused, since dropping ancestors would break their reconstruction) and
``delete_for_runs`` are implemented on every provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Self

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.base import Checkpoint as LangGraphCheckpoint
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "durability.langgraph needs LangGraph, which is an optional extra: "
        "pip install 'durability-toolkit[langgraph]'"
    ) from exc

import durability
from durability._util import redact_url
from durability.errors import CapabilityError, CheckpointNotFound, ConfigError, StoreError
from durability.model import (
    COMPLETED,
    INTERRUPTED,
    STEP_LANGGRAPH,
    Checkpoint,
    PendingWrite,
    TypedValue,
)
from durability.stores.base import Store
from durability.stores.foreign.langgraph_map import (
    BOOKKEEPING,
    INTERRUPT,
    RESUME,
    interrupt_fields,
    node_of,
    to_checkpoint,
)
from durability.stores.saver_read import SaverRead, read_for_saver

_DELTA_MARKER = "counters_since_delta_snapshot"
#: How many checkpoints' ``versions_seen`` (and interrupts) the saver remembers between calls.
_MEMORY = 10_000
#: How many tuples ``alist`` takes from the store per worker-thread hop.
_ALIST_CHUNK = 64


class DurabilitySaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver that keeps its checkpoints in a durability store.

    Args:
        store: An open :class:`~durability.stores.Store`, or a store URL (the saver then
            opens it and closes it on :meth:`close`).
        serde: A LangGraph serializer to store values as its typed bytes
            (:class:`~durability.model.TypedValue`); by default values go through
            durability's codec.
    """

    def __init__(self, store: Store | str, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self._owns_store = isinstance(store, str)
        self.store: Store = durability.open(store) if isinstance(store, str) else store
        self._typed = serde is not None
        self._lock = threading.Lock()
        # (thread, namespace, checkpoint) -> the versions_seen it was put with (a child's
        # put compares against it), and the checkpoints this process marked interrupted.
        self._seen: dict[tuple[str, str, str], Any] = {}
        self._interrupted: dict[tuple[str, str, str], Any] = {}

    def __repr__(self) -> str:
        return f"<DurabilitySaver {redact_url(self.store.url)}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store if the saver opened it from a URL."""
        if self._owns_store:
            self.store.close()

    # ------------------------------------------------------------------ values

    def _dump(self, value: Any) -> Any:
        if self._typed:
            kind, data = self.serde.dumps_typed(value)
            return TypedValue(kind, data)
        return value

    def _load(self, value: Any) -> Any:
        if isinstance(value, TypedValue):
            return self.serde.loads_typed((value.type, value.data))
        return value

    # ------------------------------------------------------------------ writes

    def put(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store one checkpoint whose parent is the config's ``checkpoint_id``."""
        thread_id, namespace, parent = _address(config)
        stored_metadata: dict[str, Any] = dict(
            get_serializable_checkpoint_metadata(config, metadata)
        )
        versions = checkpoint["channel_versions"]
        values = checkpoint["channel_values"].items()
        if self._typed:
            state = {channel: self._dump(v) for channel, v in values if channel in versions}
        else:
            state = {channel: v for channel, v in values if channel in versions}
        seen = {node: dict(v) for node, v in checkpoint.get("versions_seen", {}).items()}
        self.store.put_returning_seq(
            to_checkpoint(
                thread_id=thread_id,
                namespace=namespace,
                parent=parent,
                checkpoint=checkpoint,
                metadata=stored_metadata,
                state=state,
                parent_seen=self._parent_seen(thread_id, namespace, parent),
            )
        )
        key = (thread_id, namespace, checkpoint["id"])
        with self._lock:
            self._remember(self._seen, key, seen)
            early = self._interrupted.get(key)
        if early is not None:  # its interrupt write arrived before this put
            self._mark_interrupted(key, early)
        if parent and self._take(self._interrupted, (thread_id, namespace, parent)) is not None:
            self.store.set_status(thread_id, parent, namespace, status=COMPLETED)
        return _config(thread_id, namespace, checkpoint["id"])

    def _parent_seen(self, thread_id: str, namespace: str, parent: str | None) -> Any:
        """The parent's ``versions_seen``: remembered from its put, else read back once."""
        if not parent:
            return {}
        remembered = self._take(self._seen, (thread_id, namespace, parent))
        if remembered is not None:
            return remembered
        try:
            stored = self.store.get(thread_id, parent, namespace)
        except CheckpointNotFound:
            return {}
        return stored.metadata.get(BOOKKEEPING, {}).get("versions_seen", {})

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against the config's checkpoint (LangGraph's rules)."""
        thread_id, namespace, checkpoint_id = _address(config)
        if not checkpoint_id:
            raise ConfigError(
                f"cannot store pending writes for thread {thread_id[:80]!r}: the config names "
                "no checkpoint_id; pass the config returned by put"
            )
        self.store.put_writes(
            [
                PendingWrite(
                    thread_id=thread_id,
                    namespace=namespace,
                    checkpoint_id=checkpoint_id,
                    task_id=task_id,
                    idx=WRITES_IDX_MAP.get(channel, idx),
                    channel=channel,
                    value=self._dump(value),
                    task_path=task_path,
                )
                for idx, (channel, value) in enumerate(writes)
            ]
        )
        key = (thread_id, namespace, checkpoint_id)
        node = node_of(task_path)
        channels = {channel for channel, _ in writes}
        if INTERRUPT in channels:
            fields = interrupt_fields(
                (v for c, v in writes if c == INTERRUPT), node, task_id, clear=not self._typed
            )
            with self._lock:
                self._remember(self._interrupted, key, fields)
            # LangGraph may run this before the put of the checkpoint itself (durability
            # "async"); then the put applies the status, and this second try covers a put
            # that landed in between.
            if not self._mark_interrupted(key, fields):
                self._mark_interrupted(key, fields)
        elif RESUME in channels:
            self.store.set_status(thread_id, checkpoint_id, namespace, status=COMPLETED)
            self._take(self._interrupted, key)

    def _mark_interrupted(
        self, key: tuple[str, str, str], fields: tuple[str, dict[str, Any]]
    ) -> bool:
        thread_id, namespace, checkpoint_id = key
        reason, context = fields
        return self.store.set_status(
            thread_id,
            checkpoint_id,
            namespace,
            status=INTERRUPTED,
            interrupt_reason=reason,
            interrupt_context=context,
        )

    @staticmethod
    def _remember(
        memory: dict[tuple[str, str, str], Any], key: tuple[str, str, str], value: Any
    ) -> None:
        """Remember ``value`` under ``key``, forgetting the oldest entry past the bound."""
        if key not in memory and len(memory) >= _MEMORY:
            del memory[next(iter(memory))]
        memory[key] = value

    def _take(self, memory: dict[tuple[str, str, str], Any], key: tuple[str, str, str]) -> Any:
        with self._lock:
            return memory.pop(key, None)

    # ------------------------------------------------------------------ reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the greatest id in its thread and namespace."""
        thread_id, namespace, checkpoint_id = _address(config)
        # Straight from the row: only the state and metadata decoded, the writes read with it.
        found = read_for_saver(self.store, thread_id, namespace, checkpoint_id)
        if found is None:
            return None
        _check_langgraph(found)
        return self._tuple(found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (greatest id), across every thread when ``config`` is None.

        ``filter`` is an equality match on metadata keys, ``before`` keeps ids below its
        ``checkpoint_id``, ``limit`` applies after both.
        """
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        namespace: str | None = None
        checkpoint_id: str | None = None
        if config is None:
            thread_ids: Iterator[str] = (r.thread_id for r in self.store.iter_threads())
        else:
            conf = config["configurable"]
            thread_ids = iter([str(conf["thread_id"])])
            namespace = conf.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config)
        remaining = limit
        for thread_id in thread_ids:
            rows = self.store.newest_first(
                thread_id,
                namespace,
                before=before_id,
                limit=None if filter or checkpoint_id else remaining,
            )
            rows = [
                cp
                for cp in rows
                if cp.step_type == STEP_LANGGRAPH
                and (checkpoint_id is None or cp.checkpoint_id == checkpoint_id)
                and (not filter or all(cp.metadata.get(k) == v for k, v in filter.items()))
            ]
            if remaining is not None:
                rows = rows[:remaining]
            writes = self.store.writes_of(
                thread_id, [(cp.namespace, cp.checkpoint_id) for cp in rows]
            )
            for cp in rows:
                yield self._tuple(SaverRead.of(cp, writes[(cp.namespace, cp.checkpoint_id)]))
            if remaining is not None:
                remaining -= len(rows)
                if remaining <= 0:
                    return

    def _tuple(self, cp: SaverRead) -> CheckpointTuple:
        metadata = dict(cp.metadata)
        bookkeeping = metadata.pop(BOOKKEEPING, {})
        versions = bookkeeping.get("channel_versions", {})
        values = {ch: self._load(v) for ch, v in cp.state.items() if ch in versions}
        checkpoint: dict[str, Any] = {
            **bookkeeping,
            "id": cp.checkpoint_id,
            "channel_values": values,
        }
        ordered = sorted(cp.writes, key=_write_order) if cp.writes else ()
        return CheckpointTuple(
            config=_config(cp.thread_id, cp.namespace, cp.checkpoint_id),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,  # type: ignore[arg-type]
            parent_config=(
                _config(cp.thread_id, cp.namespace, cp.parent_checkpoint_id)
                if cp.parent_checkpoint_id
                else None
            ),
            pending_writes=[(w.task_id, w.channel, self._load(w.value)) for w in ordered],
        )

    # ------------------------------------------------------------------ deletes and copies

    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint and pending write of the thread, in every namespace."""
        self.store.delete_thread(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints whose ``metadata["run_id"]`` is listed, with their writes."""
        by_thread: dict[str, list[tuple[str, str]]] = {}
        for thread_id, namespace, checkpoint_id in self.store.checkpoints_of_runs(
            [str(r) for r in run_ids]
        ):
            by_thread.setdefault(thread_id, []).append((namespace, checkpoint_id))
        for thread_id, keys in by_thread.items():
            self.store.delete_checkpoints(thread_id, keys)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (the whole parent chain, in order) and write to a new thread.

        The copy is one transaction; a target that already holds one of the ids is refused
        (:class:`~durability.errors.CheckpointConflict`) and nothing is copied. A missing
        source copies nothing.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        history = self.store.history(source, None)
        if not history:
            return
        self.store.put_many(
            [cp.evolve(thread_id=target, seq=None, size_bytes=None) for cp in history]
        )
        writes = self.store.writes_of(source, [(cp.namespace, cp.checkpoint_id) for cp in history])
        self.store.put_writes(
            [dataclasses.replace(w, thread_id=target) for rows in writes.values() for w in rows]
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep the greatest id per namespace; ``delete``: remove the threads.

        Every thread is checked before anything is deleted: ``keep_latest`` refuses a thread
        that uses a ``DeltaChannel`` (its kept checkpoint is rebuilt from its ancestors'
        writes), raising :class:`~durability.errors.CapabilityError`.
        """
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(
                f"cannot prune: strategy {strategy!r} is not 'keep_latest' or 'delete'"
            )
        threads = list(dict.fromkeys(str(t) for t in thread_ids))
        if strategy == "delete":
            for thread_id in threads:
                self.store.delete_thread(thread_id)
            return
        plans: dict[str, list[tuple[str, str]]] = {}
        for thread_id in threads:
            history = self.store.history(thread_id, None)
            if any(_DELTA_MARKER in cp.metadata for cp in history):
                raise CapabilityError(
                    f"refusing to prune thread {thread_id[:80]!r} with keep_latest: it uses a "
                    "LangGraph DeltaChannel, whose latest value is rebuilt from earlier "
                    "checkpoints' writes; nothing was deleted. Use strategy='delete' or leave "
                    "the thread unpruned"
                )
            newest: dict[str, str] = {}
            for cp in history:
                if cp.checkpoint_id > newest.get(cp.namespace, ""):
                    newest[cp.namespace] = cp.checkpoint_id
            plans[thread_id] = [
                (cp.namespace, cp.checkpoint_id)
                for cp in history
                if newest[cp.namespace] != cp.checkpoint_id
            ]
        for thread_id, doomed in plans.items():
            if doomed:
                self.store.delete_checkpoints(thread_id, doomed)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A 32-digit counter and a random suffix, as LangGraph's own savers write them."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(str(current).split(".", 1)[0])
        return f"{counter + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` on a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, read on a worker thread a chunk at a time."""
        found = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            chunk = await asyncio.to_thread(_take_some, found, _ALIST_CHUNK)
            for item in chunk:
                yield item
            if len(chunk) < _ALIST_CHUNK:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` on a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` on a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` on a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` on a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` on a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` on a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


# ---------------------------------------------------------------------------- helpers


def _address(config: RunnableConfig) -> tuple[str, str, str | None]:
    conf = config.get("configurable") or {}
    if "thread_id" not in conf:
        raise ConfigError(
            "cannot use the LangGraph checkpointer: the config has no configurable.thread_id; "
            "pass config={'configurable': {'thread_id': '...'}}"
        )
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), get_checkpoint_id(config)


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint_id,
        }
    }


def _write_order(w: PendingWrite) -> tuple[str, str, int]:
    """LangGraph's order of a checkpoint's pending writes."""
    return (w.task_path, w.task_id, w.idx)


def _check_langgraph(cp: Checkpoint | SaverRead) -> None:
    if cp.step_type != STEP_LANGGRAPH:
        raise StoreError(
            f"cannot read thread {cp.thread_id[:80]!r} as a LangGraph thread: its checkpoint "
            f"{cp.checkpoint_id[:80]!r} was not written by a LangGraph saver (step_type "
            f"{cp.step_type!r}); use another thread id for the graph"
        )


def _take_some(items: Iterator[CheckpointTuple], n: int) -> list[CheckpointTuple]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            break
    return chunk


__all__ = ["BOOKKEEPING", "DurabilitySaver"]
