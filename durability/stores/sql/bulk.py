"""Postgres's bulk load: ``COPY … FROM STDIN`` into the checkpoints table (decision 0086).

A copy's chunk goes as one ``COPY`` inside one transaction, after its pending writes (the
store's own statements): Postgres parses nothing per row, and the outbox's statement trigger
queues the rows from the ``COPY``'s transition table as it does for an ``INSERT``. A duplicate
id fails the ``COPY`` on the table's unique hash and the transaction rolls back
(:class:`~durability.errors.CheckpointConflict`); the erased-thread check runs after it in the
same transaction (the ``COPY`` holds the lock an erase takes, as the many-row insert does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import exc as sa_exc

from durability.errors import CheckpointConflict, StoreError
from durability.stores.base import conflict_message
from durability.stores.bulk import BulkLoad
from durability.stores.rows import EncodedCheckpoint, EncodedWrite

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore

_ACTION = "copy checkpoints"


class PostgresBulk(BulkLoad):
    """``COPY`` into a Postgres store's checkpoints table (see the module)."""

    store: SQLStore

    def load(
        self, checkpoints: Sequence[EncodedCheckpoint], writes: Sequence[EncodedWrite]
    ) -> None:
        store = self.store
        sql = store.sql
        names = ", ".join(f'"{c}"' for c in sql.inserted)
        copy_sql = f"COPY {sql.table} ({names}) FROM STDIN"
        try:
            with store.db.write(_ACTION) as conn:
                if writes:
                    store.write_rows(conn, list(writes), "store pending writes")
                if not checkpoints:
                    return
                with store.db.cursor(_ACTION, conn) as cur, cur.copy(copy_sql) as copy:
                    for row in checkpoints:
                        # insert_params ends with the tombstone hash, which is not a column.
                        copy.write_row(sql.insert_params(row, "")[:-1])
                threads = list(dict.fromkeys(r.thread_id for r in checkpoints))
                store.tombstones.refuse_any(conn, threads, _ACTION)
        except StoreError as exc:
            if isinstance(exc.__cause__, sa_exc.IntegrityError):
                first = checkpoints[0]
                raise CheckpointConflict(
                    f"one of {len(checkpoints)} checkpoints was refused, nothing was written: "
                    + conflict_message(first.thread_id, first.namespace, first.checkpoint_id)
                ) from exc.__cause__
            raise


__all__ = ["PostgresBulk"]
