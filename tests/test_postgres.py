"""What is particular to the SQL store on a real PostgreSQL server: schemas, migrations,
column types, hashed indexes, session names, concurrent setup."""

from __future__ import annotations

import random
import string
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import POSTGRES_URL, postgres_admin
from sql_support import assert_rows_kept, write_version_1_store

import durability
from durability import Checkpoint, PendingWrite
from durability.errors import CheckpointStoreFormatError, ConfigError, StoreError
from durability.settings import Settings
from durability.stores.sql import SQLStore
from durability.stores.sql.migrations import MIGRATIONS
from durability.stores.sql.schema import meta_table
from durability.testing.suite import in_threads

pytestmark = pytest.mark.postgres


@pytest.fixture
def admin() -> Iterator[Any]:
    engine = postgres_admin()
    yield engine
    engine.dispose()


@pytest.fixture
def schema(admin: Any) -> Iterator[str]:
    """A fresh schema name, dropped afterwards (the store creates it)."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def open_pg(schema: str, **options: Any) -> SQLStore:
    store = durability.open(POSTGRES_URL, schema=schema, settings=Settings(), **options)
    assert isinstance(store, SQLStore)
    return store


def tables_in(admin: Any, schema: str) -> set[str]:
    with admin.connect() as conn:
        return set(
            conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %(s)s",
                {"s": schema},
            ).scalars()
        )


def test_schema_is_created_and_holds_every_table(admin: Any, schema: str) -> None:
    """schema= (or ?schema=) puts the store in its own schema, created when missing."""
    assert tables_in(admin, schema) == set()
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id="t"))
    expected = {
        "durability_checkpoints",
        "durability_writes",
        "durability_threads",
        "durability_parks",
        "durability_meta",
        "durability_migrations",
        "durability_connections",
        "durability_sweep_lock",
        "durability_outbox",
        "durability_synced",
        "durability_tombstones",
        "durability_erase_requests",
        "durability_outbox_history",
    }
    assert tables_in(admin, schema) == expected
    with durability.open(f"{POSTGRES_URL}?schema={schema}", settings=Settings()) as same:
        assert same.latest("t") is not None
    for bad in ("1starts_with_digit", "has-dash", "x" * 64, 'quote"'):
        with pytest.raises(ConfigError, match="plain SQL identifier"):
            durability.open(POSTGRES_URL, schema=bad, settings=Settings())


def test_payloads_are_text_and_long_ids_are_indexed_by_hash(admin: Any, schema: str) -> None:
    """State is TEXT (JSONB cannot hold \\u0000); indexes cover 128-bit hashes, never whole raw ids."""
    with open_pg(schema) as store:
        long_id = "é" * 10_000
        stored = store.put(
            Checkpoint(thread_id=long_id, checkpoint_id=long_id, state={"nul": "a\x00b"})
        )
        assert store.get(long_id, long_id) == stored
    with admin.connect() as conn:
        types = dict(
            conn.exec_driver_sql(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %(s)s AND table_name = 'durability_checkpoints'",
                {"s": schema},
            ).all()
        )
        indexes = (
            conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %(s)s", {"s": schema}
            )
            .scalars()
            .all()
        )
    for column in (
        "state",
        "node_input",
        "node_output",
        "metadata",
        "interrupt_context",
        "thread_id",
        "checkpoint_id",
    ):
        assert types[column] == "text", column
    assert indexes
    # Ids are indexed by hash; the thread search indexes only an id's first characters.
    whole = [i.replace('"left"(thread_id, 200)', "") for i in indexes]
    assert not any("(thread_id" in i or "(checkpoint_id" in i or "namespace" in i for i in whole), (
        indexes
    )


def test_a_10_kb_random_thread_id_gets_a_ledger_record_and_is_found_by_prefix(schema: str) -> None:
    """A btree entry holds ~2.7 KB: an incompressible 10 KB id is marked, listed and found."""
    rng = random.Random(13)
    thread_id = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(10_000))
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id=thread_id, state={"n": 1}))
        store.mark_finished(thread_id)
        assert store.scans.find_threads(thread_id[:5]) == [thread_id]
        assert store.scans.find_threads(thread_id) == [thread_id]
        assert store.scans.find_threads(thread_id[:300], after=thread_id) == []


def test_outbox_migration_adds_columns_if_not_exists_and_marks_old_rows_synced(
    admin: Any, schema: str
) -> None:
    """A version-1 store is upgraded in place (ADD COLUMN IF NOT EXISTS, a column already there is kept); old rows count as replicated."""
    engine = sa.create_engine(POSTGRES_URL).execution_options(schema_translate_map={None: schema})
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        write_version_1_store(conn)
        # A column an earlier, interrupted upgrade already added: IF NOT EXISTS must skip it.
        conn.exec_driver_sql(
            f'ALTER TABLE "{schema}".durability_checkpoints ADD COLUMN sync_error TEXT'
        )
    engine.dispose()
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id="new-thread"))
        assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))
        assert {e.thread_id: e.state for e in store.outbox()} == {
            "old-thread": "synced",
            "new-thread": "pending",
        }
        store._setup()  # again: nothing to do
        assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))


def test_a_store_from_before_version_7_upgrades_to_thread_first_keys(
    admin: Any, schema: str
) -> None:
    """Version 7 swaps the hash-only key indexes for thread-first ones; rows, reads and uniqueness stay."""
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id="t", checkpoint_id="c1"))
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t", checkpoint_id="c1", task_id="k", idx=0, channel="x", value=1
                )
            ]
        )
    with admin.begin() as conn:  # the store as version 6 left it
        for sql in (
            "DROP INDEX {s}.ix_durability_checkpoints_key",
            "DROP INDEX {s}.ix_durability_writes_key",
            "CREATE UNIQUE INDEX ix_durability_checkpoints_ckey ON {s}.durability_checkpoints (ckey)",
            "CREATE INDEX ix_durability_writes_ckey ON {s}.durability_writes (ckey)",
            "CREATE INDEX ix_durability_writes_thread ON {s}.durability_writes (tkey)",
            "DELETE FROM {s}.durability_migrations WHERE version = 7",
        ):
            conn.exec_driver_sql(sql.format(s=f'"{schema}"'))
    with open_pg(schema) as store:
        assert_rows_kept(store)
    with admin.connect() as conn:
        indexes = set(
            conn.exec_driver_sql(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %(s)s", {"s": schema}
            ).scalars()
        )
    assert {"ix_durability_checkpoints_key", "ix_durability_writes_key"} <= indexes
    assert not indexes & {
        "ix_durability_checkpoints_ckey",
        "ix_durability_writes_ckey",
        "ix_durability_writes_thread",
    }


def test_concurrent_first_use_sets_up_once(schema: str) -> None:
    """Eight stores using a fresh schema at once all succeed (setup is serialised by an advisory lock)."""
    stores = [open_pg(schema) for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def first_use(store: SQLStore, n: int) -> None:
        try:
            barrier.wait()
            store.put(Checkpoint(thread_id=f"t{n}"))
        except BaseException as exc:  # collected below
            errors.append(exc)

    in_threads(first_use, [(s, n) for n, s in enumerate(stores)])
    try:
        assert errors == []
        assert stores[0].applied_migrations() == list(range(1, len(MIGRATIONS) + 1))
        assert len(list(stores[0].iter_threads())) == 8
    finally:
        for s in stores:
            s.close()


def test_sessions_are_named_and_pooled(admin: Any, schema: str) -> None:
    """Sessions show as application_name 'durability' unless the URL names them; the pool is bounded."""
    with open_pg(schema, pool_size=2, max_overflow=1) as store:
        store.put(Checkpoint(thread_id="t"))
        assert store.db.engine.pool.size() == 2  # type: ignore[attr-defined]
        with admin.connect() as conn:
            names = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'durability' AND datname = current_database()"
            ).scalar()
        assert names >= 1


def test_checkpoints_without_a_generation_are_refused(admin: Any, schema: str) -> None:
    """A schema holding checkpoints but no recorded generation is refused at first use, naming
    the reset command; after `reset` the store is usable again."""
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id="t"))
    with admin.begin() as conn:
        conn.execute(meta_table.delete().execution_options(schema_translate_map={None: schema}))
    with open_pg(schema) as store:
        with pytest.raises(CheckpointStoreFormatError, match="durability store reset"):
            store.history("t")
        store.reset()
        assert store.history("t") == []
        store.put(Checkpoint(thread_id="t"))
        assert len(store.history("t")) == 1


def test_a_value_postgres_cannot_hold_is_refused_as_a_value_not_a_schema_problem(
    schema: str, tmp_path: Any
) -> None:
    """A NUL an older SQLite store kept in a label, copied into Postgres, is refused naming the
    value; the advice is never to reset the store, and the destination is left as it was."""
    source = durability.open(f"sqlite:///{tmp_path / 'old.db'}")
    source.put(Checkpoint(thread_id="t", node_id="a-b"))
    with sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}").begin() as conn:
        conn.exec_driver_sql("UPDATE durability_checkpoints SET node_id = 'a' || char(0) || 'b'")
    with open_pg(schema) as store:
        store.put(Checkpoint(thread_id="kept", node_id="first"))
        with pytest.raises(StoreError) as caught:
            durability.copy(source, store)
        message = str(caught.value)
        assert "NUL" in message
        assert "store reset" not in message
        assert [r.thread_id for r in store.iter_threads()] == ["kept"]
    source.close()
