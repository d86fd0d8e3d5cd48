"""The Redis store's whole-store reads: one script per thread, pipelined in chunks.

Each thread answers with its ledger hash, each checkpoint's header line (its scalar fields:
the payload texts after the line never leave the server) and its two outbox state hashes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from durability._util import chunks
from durability.stores.redis import documents as docs
from durability.stores.redis.keys import thread_tag
from durability.stores.redis.sweep_lock import RedisSweepLock
from durability.stores.rows import CheckpointAddress, Select
from durability.stores.scans import (
    CHECKPOINT_COLUMNS,
    THREAD_COLUMNS,
    Columns,
    Scans,
    column_chunks,
    thread_row,
)
from durability.stores.sweep_lock import SweepLock

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore


class RedisScans(Scans):
    """Analysis reads straight from the header lines of each thread's documents."""

    store: RedisStore

    def sweep_lock(self) -> SweepLock:
        return RedisSweepLock(self.store)

    def _threads(self, thread_id: str | None) -> Iterator[tuple[dict[str, bytes], Any]]:
        """Each thread's ledger fields and ``analysis_thread`` answer: tags by ZSCAN, scripts pipelined."""
        store = self.store
        if thread_id is not None:
            tags = [thread_tag(thread_id)]
        else:
            tags = store.run(
                "list threads",
                lambda _r: [
                    m.decode() for m, _ in store.client.zscan_iter(store.keys.threads, count=1000)
                ],
            )
        for batch in chunks(tags):
            raw = store.eval_many(
                "read thread columns", "analysis_thread", [(t, []) for t in batch], write=False
            )
            for answer in raw:
                fields = docs.pairs(answer[0])
                if "id" in fields and (thread_id is None or fields["id"].decode() == thread_id):
                    yield fields, answer

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for _fields, answer in self._threads(thread_id):
                pending, synced = docs.pairs(answer[2]), docs.pairs(answer[3])
                heads = answer[1]
                for j in range(0, len(heads), 2):
                    seq = heads[j].decode()
                    head = docs.header(heads[j + 1])
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
                        *_state(seq, pending, synced),
                        head["runner"],
                    )

        return column_chunks(CHECKPOINT_COLUMNS, rows(), chunk_size)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for fields, answer in self._threads(None):
                heads = answer[1]
                points = []
                for j in range(0, len(heads), 2):
                    head = docs.header(heads[j + 1])
                    points.append(
                        (int(heads[j]), head["created_at"], head["status"], head["run_id"])
                    )
                yield thread_row(docs.record(fields, len(points)), points)

        return column_chunks(THREAD_COLUMNS, rows(), chunk_size)

    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[CheckpointAddress]:
        wanted = set(run_ids)
        found = []
        for record in self.store.iter_threads():
            # The run id is in each document's header: no payload is decoded.
            for row in self.store._select(Select(record.thread_id, None)):
                if row.run_id in wanted:
                    found.append((row.thread_id, row.namespace, row.checkpoint_id))
        return found


def _state(
    seq: str, pending: dict[str, bytes], synced: dict[str, bytes]
) -> tuple[bool | None, str | None]:
    """``(synced, sync_error)`` of a row from its thread's outbox state hashes."""
    if "h" + seq in pending:
        reason = pending.get("q" + seq)
        return reason is not None, None if reason is None else reason.decode()
    return (True, None) if "h" + seq in synced else (None, None)
