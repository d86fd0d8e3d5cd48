"""Old SQL stores for the upgrade tests of SQLite and Postgres, and what an upgrade keeps."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from durability import Checkpoint
from durability.errors import CheckpointConflict
from durability.stores.rows import INTEGER_FIELDS, NULLABLE_FIELDS, PAYLOAD_FIELDS, STORED_FIELDS
from durability.stores.sql import SQLStore
from durability.stores.sql.migrations import MIGRATIONS
from durability.stores.sql.schema import checkpoint_table, meta_table, migrations_table

#: The stored fields kept as numbers (``created_at`` as microseconds since the epoch).
_NUMBERS = INTEGER_FIELDS | {"created_at"}


def write_version_1_store(conn: sa.Connection) -> None:
    """The tables of version 1 (no outbox columns) holding one checkpoint, ``old-1`` of
    ``old-thread``, in format generation 1."""
    migrations_table.create(conn)
    MIGRATIONS[0][1](conn)
    conn.execute(migrations_table.insert().values(version=1, name="base tables", applied_at=0))
    conn.execute(meta_table.insert().values(key="format_generation", value="1"))
    v1 = checkpoint_table(sa.MetaData(), outbox=False)
    conn.execute(
        v1.insert().values(
            **blank_row(
                tkey="k",
                ckey="c",
                thread_id="old-thread",
                checkpoint_id="old-1",
                node_id="n",
                status="completed",
                size_bytes=12,
            )
        )
    )


def blank_row(**values: Any) -> dict[str, Any]:
    """A checkpoint table row: ``values``, and every other stored field that may not be empty
    as an empty one (``0``, ``""``, or ``"{}"`` for a payload)."""
    empty = {
        name: "{}" if name in PAYLOAD_FIELDS else 0 if name in _NUMBERS else ""
        for name in STORED_FIELDS
        if name not in NULLABLE_FIELDS
    }
    return {**empty, **values}


def assert_rows_kept(store: SQLStore) -> None:
    """After an upgrade: checkpoint ``c1`` of thread ``t`` and its pending write (value ``1``)
    read back, the id is still refused a second time, and every migration is applied."""
    assert store.get("t", "c1") is not None
    assert [w.value for w in store.writes("t", "c1")] == [1]
    with pytest.raises(CheckpointConflict):
        store.put(Checkpoint(thread_id="t", checkpoint_id="c1", node_id="other"))
    assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))
