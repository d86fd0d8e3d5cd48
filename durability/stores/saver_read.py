"""A checkpoint saver's read: one checkpoint and its pending writes, decoding only what it maps.

LangGraph's ``get_tuple`` needs a checkpoint's ids, its state, its metadata and its pending
writes. Reading it through :meth:`~durability.stores.Store.get` decoded four more payloads and
built a 24-field :class:`~durability.model.Checkpoint`, then read the writes with a second
statement, which together cost more than the query (issue 15). Here a store answers with its
rows (a SQL store with one statement) and only the state and metadata are decoded; the
sealing rules, the id checks and the refusals are the store's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from durability import codec
from durability.model import Checkpoint, PendingWrite
from durability.stores.ids import check_id, check_thread
from durability.stores.rows import EncodedCheckpoint, SaverRow, Select
from durability.stores.sealing import open_write, opened_state

if TYPE_CHECKING:
    from durability.stores.base import Store


class SaverRead(NamedTuple):
    """What a checkpoint saver maps of a stored checkpoint: ids, state, metadata, writes.

    ``writes`` are the checkpoint's pending writes in write order. A named tuple: one is built
    per read, and a frozen dataclass's ``__init__`` cost more than its fields.
    """

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    step_type: str | None
    state: Any
    metadata: dict[str, Any]
    writes: list[PendingWrite]

    @classmethod
    def of(cls, cp: Checkpoint, writes: list[PendingWrite]) -> SaverRead:
        """What a saver maps of a checkpoint already decoded (a foreign store's, or a listing's)."""
        return cls(
            cp.thread_id,
            cp.namespace,
            cp.checkpoint_id,
            cp.parent_checkpoint_id,
            cp.step_type,
            cp.state,
            cp.metadata,
            writes,
        )


def read_for_saver(
    store: Store, thread_id: str, namespace: str, checkpoint_id: str | None
) -> SaverRead | None:
    """The checkpoint ``checkpoint_id`` of the thread and namespace, or without one the
    greatest id there (LangGraph's latest), with its pending writes; ``None`` when absent."""
    if checkpoint_id:
        query = Select(thread_id, namespace, checkpoint_id=checkpoint_id)
    else:
        query = Select(thread_id, namespace, order="id_desc", limit=1)
    action = query.action
    check_thread(thread_id, namespace, action)
    if checkpoint_id:
        check_id(checkpoint_id, "checkpoint_id", action=action)
    store.ready()
    found = store._select_with_writes(query)
    if found is None:
        return None
    row, write_rows = found
    writes = [open_write(store, w, action) for w in write_rows]
    if not isinstance(row, EncodedCheckpoint | SaverRow):
        return SaverRead.of(row.decode(), writes)  # a foreign store's row decodes itself
    return SaverRead(
        row.thread_id,
        row.namespace,
        row.checkpoint_id,
        row.parent_checkpoint_id,
        row.step_type,
        codec.loads(opened_state(store, row, action), path="state"),
        codec.loads(row.metadata, path="metadata"),
        writes,
    )
