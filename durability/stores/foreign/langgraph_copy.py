"""Copying threads *into* a LangGraph store, through LangGraph's own saver (decision 0084).

``durability.copy(src, "langgraph+sqlite:///…?writable=true")`` (or ``langgraph+postgresql``)
writes each checkpoint with the real ``SqliteSaver`` / ``PostgresSaver``'s ``put`` and its
pending writes with ``put_writes``, so the rows are exactly the ones LangGraph writes itself:
thread ids, namespaces, checkpoint ids, parents, metadata, channel versions and the writes'
task ids, paths and indexes are kept; SQLite keeps the write order (``rowid``), Postgres keeps
none of its own (it orders by id). A value another serializer wrote
(:class:`~durability.model.TypedValue`, e.g. ``EncryptedSerializer``'s bytes) is handed to the
saver as those bytes, untouched.

What LangGraph's tables have no place for is found before anything is written, per thread, by
asking what the LangGraph store would read back and comparing it with the source:

* **never carried** (the thread is refused): a checkpoint no LangGraph saver wrote (a
  durability runner's or fastaiagent's step) — LangGraph could not resume from it;
* **lost unless dropped on purpose** (refused unless ``lossy=True`` / ``--lossy``, which drops
  them and says so in the plan): a run-end checkpoint; a status, node or other field that
  LangGraph derives differently (``failed``, ``node_input``, ``runner``…); metadata that is not
  JSON; a value LangGraph's serializer does not give back unchanged; a pending write whose
  index ``put_writes`` cannot reproduce; and state the source keeps encrypted (LangGraph's saver
  would store it in clear).

The ledger's run start, declared retention and finished mark go to the store's sidecar ledger
(:mod:`~durability.stores.foreign.langgraph_sidecar`), with their times; leases and parks are
not copied (as between durability stores).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from durability import codec
from durability.model import STEP_LANGGRAPH, Checkpoint, PendingWrite, TypedValue
from durability.stores.foreign.langgraph_map import BOOKKEEPING, INTERRUPT, RESUME, to_checkpoint
from durability.stores.foreign.langgraph_retention import check_schema

if TYPE_CHECKING:
    from durability.stores.base import Store
    from durability.stores.foreign.langgraph import LangGraphStore

#: Fields LangGraph does not keep as such: state and metadata are compared on their own, the
#: interrupt's reason and context are derived again from the ``__interrupt__`` writes copied.
_UNCOMPARED = frozenset(
    {"seq", "size_bytes", "state", "metadata", "interrupt_reason", "interrupt_context"}
)
#: A metadata key the LangGraph reader adds (what strict decoding could not revive): not stored.
_READER_NOTE = "unrevivable"
#: How many losses a plan row names before "and N more".
_NAMED = 4


@dataclass(frozen=True)
class Verdict:
    """What copying one thread into a LangGraph store would not carry: ``never`` refuses it,
    ``lost`` (labels with counts) needs ``lossy=True``."""

    never: str | None
    lost: tuple[str, ...]

    def describe(self) -> str:
        """The losses, the most frequent first, for a plan row's reason."""
        shown = ", ".join(self.lost[:_NAMED])
        more = f" and {len(self.lost) - _NAMED} more" if len(self.lost) > _NAMED else ""
        return shown + more


def check_thread(src: Store, dst: LangGraphStore, thread_id: str) -> Verdict:
    """What copying ``thread_id`` from ``src`` into ``dst`` would not carry (see the module)."""
    serde = _serializer()
    history = src.history(thread_id, None)
    writes = src.writes_of(thread_id, [(c.namespace, c.checkpoint_id) for c in history])
    seen = {
        (c.namespace, c.checkpoint_id): (_bookkeeping(c) or {}).get("versions_seen") or {}
        for c in history
    }
    lost: Counter[str] = Counter()
    if src.sealer is not None:
        lost["state encrypted at rest here (LangGraph's saver would store it in clear)"] += 1
    for cp in history:
        if cp.step_type != STEP_LANGGRAPH or _bookkeeping(cp) is None:
            if cp.is_run_end:
                lost["run end (LangGraph keeps none)"] += 1
                continue
            return Verdict(
                f"its checkpoint {cp.checkpoint_id[:80]!r} was not written by a LangGraph saver "
                f"(step_type {cp.step_type!r}): LangGraph's tables have no place for it and a "
                "graph could not resume from it",
                (),
            )
        pending = writes.get((cp.namespace, cp.checkpoint_id), [])
        parent = seen.get((cp.namespace, cp.parent_checkpoint_id or ""), {})
        lost.update(_checkpoint_losses(cp, pending, parent, serde, dst.dialect))
        lost.update(_write_losses(pending, serde))
    return Verdict(None, tuple(f"{label} ×{n}" for label, n in lost.most_common()))


def _bookkeeping(cp: Checkpoint) -> dict[str, Any] | None:
    """LangGraph's bookkeeping in ``cp``'s metadata, or ``None`` when there is none as a saver
    writes it (any writer may put anything under its key, and it is handed to LangGraph)."""
    found = cp.metadata.get(BOOKKEEPING) if isinstance(cp.metadata, dict) else None
    if not isinstance(found, dict):
        return None
    kept = (found.get(name) for name in ("channel_versions", "versions_seen"))
    return found if all(v is None or isinstance(v, dict) for v in kept) else None


def _checkpoint_losses(
    cp: Checkpoint, writes: Sequence[PendingWrite], parent_seen: Any, serde: Any, dialect: str
) -> list[str]:
    bookkeeping = cp.metadata[BOOKKEEPING]
    versions = bookkeeping.get("channel_versions") or {}
    metadata = stored_metadata(cp)
    channels = {w.channel for w in writes}
    back = to_checkpoint(
        thread_id=cp.thread_id,
        namespace=cp.namespace,
        parent=cp.parent_checkpoint_id,
        checkpoint={**bookkeeping, "id": cp.checkpoint_id},
        metadata=metadata,
        state={},
        parent_seen=parent_seen,
        interrupt=("", {}) if INTERRUPT in channels and RESUME not in channels else None,
    )
    lost = [
        f"{f.name} {getattr(cp, f.name)!r}"[:80]
        for f in fields(Checkpoint)
        if f.name not in _UNCOMPARED and getattr(cp, f.name) != getattr(back, f.name)
    ]
    if _json_round_trip(metadata) != metadata:
        lost.append("metadata that is not plain JSON")
    for channel, value in cp.state.items():
        if channel not in versions:
            lost.append(f"state channel {channel!r} (not in channel_versions)")
        elif not _kept(value, serde, inline=dialect == "sqlite"):
            lost.append(f"state channel {channel!r} (LangGraph's serializer changes it)")
    return lost


def _write_losses(writes: Sequence[PendingWrite], serde: Any) -> list[str]:
    lost = []
    for task in _tasks(writes).values():
        if _call_order(task) is None:
            lost.append("pending write indexes put_writes cannot reproduce")
    for w in writes:
        if not _kept(w.value, serde, inline=False):
            lost.append(f"pending write to {w.channel!r} (LangGraph's serializer changes it)")
    return lost


def _tasks(writes: Sequence[PendingWrite]) -> dict[tuple[str, str], list[PendingWrite]]:
    tasks: dict[tuple[str, str], list[PendingWrite]] = {}
    for w in writes:
        tasks.setdefault((w.task_id, w.task_path), []).append(w)
    return tasks


def _call_order(task: Sequence[PendingWrite]) -> list[PendingWrite] | None:
    """A task's writes in the order one ``put_writes`` call gives each its stored ``idx``, or
    ``None`` when no order does. ``put_writes`` numbers writes by position, except LangGraph's
    special channels, whose index is fixed: a regular write goes at its index, special ones fill
    the positions left (``__resume__`` then writes 1 and 2 is how a resumed task's call looks)."""
    from langgraph.checkpoint.base import WRITES_IDX_MAP

    special = [w for w in task if w.channel in WRITES_IDX_MAP]
    if any(w.idx != WRITES_IDX_MAP[w.channel] for w in special):
        return None
    regular = {w.idx: w for w in task if w.channel not in WRITES_IDX_MAP}
    if len(regular) < len(task) - len(special) or any(i < 0 for i in regular):
        return None
    order: list[PendingWrite] = []
    spare = iter(special)
    for position in range(max(regular, default=-1) + 1):
        found = regular.get(position) or next(spare, None)
        if found is None:
            return None
        order.append(found)
    return order + list(spare)


def stored_metadata(cp: Checkpoint) -> dict[str, Any]:
    """The metadata handed to the saver: LangGraph's own, without durability's bookkeeping key
    or the reader's note of what it could not revive."""
    return {k: v for k, v in cp.metadata.items() if k not in (BOOKKEEPING, _READER_NOTE)}


def _json_round_trip(metadata: dict[str, Any]) -> Any:
    from langgraph.checkpoint.base import get_checkpoint_metadata

    try:
        return json.loads(json.dumps(get_checkpoint_metadata({}, metadata)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _kept(value: Any, serde: Any, *, inline: bool) -> bool:
    """Whether LangGraph's serializer gives ``value`` back as durability's codec keeps it.

    ``inline``: stored inside the whole checkpoint's bytes (SQLite), where another
    serializer's bytes cannot be handed over as they are."""
    if isinstance(value, TypedValue):
        return not inline
    try:
        back = serde.loads_typed(serde.dumps_typed(value))
        return codec.dumps(_as_lists(back)) == codec.dumps(_as_lists(value))
    except Exception:  # any failure to round-trip is a loss to name
        return False


def _as_lists(value: Any) -> Any:
    """``value`` with its tuples as lists: LangGraph's serializer gives every tuple back as a
    list, on its own savers too, so that is not a loss of the copy."""
    if isinstance(value, tuple | list):
        return [_as_lists(v) for v in value]
    if type(value) is dict:
        return {k: _as_lists(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------- writing


class _CarryTyped:
    """LangGraph's serializer, handing a :class:`TypedValue` over as the bytes it holds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, TypedValue):
            return obj.type, obj.data
        result: tuple[str, bytes] = self.inner.dumps_typed(obj)
        return result

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


def _serializer() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


class LangGraphWriter:
    """The real LangGraph saver over a writable LangGraph store, putting copied checkpoints."""

    def __init__(self, store: LangGraphStore) -> None:
        if not store.writable:
            raise store.refuse("copy threads into it")
        check_schema(store, "copy threads into it")
        self.store = store
        serde = _CarryTyped(_serializer())
        if store.dialect == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn: Any = sqlite3.connect(str(store.path), check_same_thread=False, timeout=30.0)
            self.saver: Any = SqliteSaver(conn, serde=serde)
            self._chunk: Callable[[], AbstractContextManager[Any]] = nullcontext
        else:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.conninfo import make_conninfo
            from psycopg.rows import dict_row

            conninfo = store.engine.url.set(drivername="postgresql").render_as_string(
                hide_password=False
            )
            if store.schema:  # a plain identifier (checked when the store was opened)
                conninfo = make_conninfo(conninfo, options=f"-c search_path={store.schema}")
            conn = psycopg.connect(
                conninfo,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
            )
            self.saver = PostgresSaver(conn, serde=serde)
            # One transaction per chunk: a chunk is in whole or not at all.
            self._chunk = conn.transaction
        self._conn = conn
        self._versions: dict[tuple[str, str], Any] = {}

    def close(self) -> None:
        self._conn.close()

    def put_chunk(
        self,
        target: str,
        checkpoints: Sequence[Checkpoint],
        writes: dict[tuple[str, str], list[PendingWrite]],
    ) -> tuple[int, int]:
        """Put one chunk under the thread id ``target``: each checkpoint's writes, then it
        (a kill leaves a prefix of checkpoints, each with its writes). Run ends are dropped
        (the plan asked for ``lossy``). Returns the checkpoints and writes put."""
        put = [0, 0]
        with self._chunk():
            for cp in checkpoints:
                if cp.step_type != STEP_LANGGRAPH:
                    continue
                pending = writes.get((cp.namespace, cp.checkpoint_id), [])
                self._put_writes(target, cp, pending)
                self._put(target, cp)
                put[0] += 1
                put[1] += len(pending)
        return put[0], put[1]

    def end_thread(self) -> None:
        """Forget the channel versions remembered for the thread just copied."""
        self._versions.clear()

    def _put(self, target: str, cp: Checkpoint) -> None:
        bookkeeping = dict(cp.metadata[BOOKKEEPING])
        versions = dict(bookkeeping.get("channel_versions") or {})
        checkpoint = {
            **bookkeeping,
            "id": cp.checkpoint_id,
            "channel_values": {c: v for c, v in cp.state.items() if c in versions},
        }
        # Only the channels that moved since the parent, as LangGraph puts them; all of them
        # when the parent was not put by this copy (Postgres keeps a blob per version once).
        parent = self._versions.get((cp.namespace, cp.parent_checkpoint_id or ""))
        moved = {c: v for c, v in versions.items() if parent is None or parent.get(c) != v}
        configurable = {"thread_id": target, "checkpoint_ns": cp.namespace}
        if cp.parent_checkpoint_id:
            configurable["checkpoint_id"] = cp.parent_checkpoint_id
        self.saver.put({"configurable": configurable}, checkpoint, stored_metadata(cp), moved)
        self._versions[(cp.namespace, cp.checkpoint_id)] = versions

    def _put_writes(self, target: str, cp: Checkpoint, writes: Sequence[PendingWrite]) -> None:
        config = {
            "configurable": {
                "thread_id": target,
                "checkpoint_ns": cp.namespace,
                "checkpoint_id": cp.checkpoint_id,
            }
        }
        for (task_id, task_path), task in _tasks(writes).items():
            # No order reproduces the indexes only when the plan was told lossy: by index then.
            ordered = _call_order(task) or sorted(task, key=lambda w: w.idx)
            self.saver.put_writes(
                config, [(w.channel, w.value) for w in ordered], task_id, task_path
            )


__all__ = ["LangGraphWriter", "Verdict", "check_thread", "stored_metadata"]
