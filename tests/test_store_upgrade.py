"""A store written by the previous release (schema version 9, ``tests/fixtures/store-v9.db``,
written by commit 9dec4ba's code: see tests/fixtures/README.md) upgrades in place without loss.

Postgres gets the same store by replaying versions 1 to 9 and copying the fixture's rows in.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import POSTGRES_URL, postgres_admin

import durability
from durability import Checkpoint
from durability.cli import cli
from durability.clock import to_micros
from durability.errors import StoreNeedsMigration
from durability.settings import Settings
from durability.stores.sql import SQLStore, rebuild
from durability.stores.sql.migrations import MIGRATIONS

FIXTURE = Path(__file__).parent / "fixtures" / "store-v9.db"
#: The same store written by the release before version 16 (the outbox row added by a trigger).
FIXTURE_V15 = Path(__file__).parent / "fixtures" / "store-v15.db"
#: The fixture's outbox columns, as version 9 kept them in the checkpoints table.
OLD_STATE = "seq, synced, sync_error, attempts, last_error, synced_at"
TABLES = ("durability_checkpoints", "durability_writes", "durability_connections")


def old_rows(table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with sqlite3.connect(FIXTURE) as raw:
        cursor = raw.execute(f"SELECT * FROM {table}")
        return [d[0] for d in cursor.description], cursor.fetchall()


def expected_entries() -> dict[int, tuple[Any, ...]]:
    """Per seq, what version 9 said of the row: state, reason, attempts, last error, synced at."""
    with sqlite3.connect(FIXTURE) as raw:
        rows = raw.execute(f"SELECT {OLD_STATE} FROM durability_checkpoints").fetchall()
    return {
        seq: (
            "pending" if not synced else "quarantined" if error else "synced",
            error,
            attempts,
            last_error,
            synced_at,
        )
        for seq, synced, error, attempts, last_error, synced_at in rows
    }


def check_upgraded(store: SQLStore, expected: dict[int, tuple[Any, ...]] | None = None) -> None:
    """Every row, its outbox state (``expected``: the v9 fixture's) and the pending write
    survive; the drain order, a new put's fresh seq and the outbox's upkeep on puts and
    deletes work on the upgraded store."""
    store.ready()
    assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))
    entries = {
        e.seq: (
            e.state,
            e.sync_error,
            e.attempts,
            e.last_error,
            None if e.synced_at is None else to_micros(e.synced_at),
        )
        for e in store.outbox.entries()
    }
    assert entries == (expected_entries() if expected is None else expected)
    assert [cp.checkpoint_id for cp in store.history("alpha")] == ["a1", "a2", "a3"]
    assert store.latest("alpha", "sub").state == {"step": "s1", "tags": ["a", "b"]}  # type: ignore[union-attr]
    assert store.latest("x" * 10_000).checkpoint_id == "long"  # type: ignore[union-attr]
    assert [w.value for w in store.writes("alpha", "a3")] == [{"v": 1}]
    pending = store.fetch_unsynced_encoded(limit=10)
    assert [r.checkpoint_id for r in pending] == ["b1", "a3", "s1", "b2", "long"]
    fresh = store.put(Checkpoint(thread_id="alpha", checkpoint_id="a4", project_id="p1"))
    assert fresh.seq == 10, "seq 9 was used by the deleted thread: never reused"
    store.mark_sent([("alpha", fresh.seq)])
    assert store.outbox.entries(thread_id="alpha")[-1].state == "synced"
    store.delete_thread("beta")
    assert {e.thread_id for e in store.outbox.entries()} == {
        "before-connect",
        "alpha",
        "x" * 10_000,
    }
    assert [c.project_id for c in store.connections()] == ["p1"]


def test_a_sqlite_store_of_version_9_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    shutil.copy(FIXTURE, path)
    with durability.open(f"sqlite:///{path}", settings=Settings()) as store:
        assert isinstance(store, SQLStore)
        check_upgraded(store)


@pytest.fixture
def v9_schema() -> Iterator[str]:
    """A Postgres schema at version 9 holding the fixture's rows (dropped afterwards)."""
    name = f"test_v9_{uuid.uuid4().hex[:10]}"
    admin: Any = postgres_admin()
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{name}"')
            conn.exec_driver_sql(
                "CREATE TABLE durability_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at BIGINT NOT NULL)"
            )
            for version, (label, step) in enumerate(MIGRATIONS[:9], start=1):
                step(conn)
                conn.exec_driver_sql(
                    "INSERT INTO durability_migrations VALUES (%s, %s, 0)", (version, label)
                )
            for table in (*TABLES, "durability_meta"):
                columns, rows = old_rows(table)
                marks = ", ".join(["%s"] * len(columns))
                if "synced" in columns:
                    at = columns.index("synced")
                    rows = [(*r[:at], bool(r[at]), *r[at + 1 :]) for r in rows]
                conn.exec_driver_sql(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                    rows,
                )
            conn.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('durability_checkpoints', 'seq'), 9)"
            )
        yield name
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        admin.dispose()


@pytest.mark.postgres
def test_a_postgres_store_of_version_9_upgrades_in_place(v9_schema: str) -> None:
    with durability.open(POSTGRES_URL, schema=v9_schema, settings=Settings()) as store:
        assert isinstance(store, SQLStore)
        check_upgraded(store)


def test_a_large_store_waits_for_the_migrate_command_which_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table over the open-time limit is refused at open (unchanged), planned by
    `durability store migrate --plan`, and rebuilt by the command in batches; a migration
    stopped after a batch resumes from there."""
    monkeypatch.setattr(rebuild, "REBUILD_AT_OPEN_ROWS", 5)
    monkeypatch.setattr(rebuild, "BATCH_ROWS", 3)
    path = tmp_path / "v9.db"
    shutil.copy(FIXTURE, path)
    url = f"sqlite:///{path}"
    with durability.open(url, settings=Settings()) as store:
        with pytest.raises(StoreNeedsMigration, match="durability store migrate URL"):
            store.ready()
        assert isinstance(store, SQLStore)
        assert store.applied_migrations() == list(range(1, 10)), "the refusal changed nothing"
        plan = CliRunner().invoke(cli, ["store", "migrate", url, "--plan", "--json"])
        assert plan.exit_code == 0, plan.output
        assert [s["version"] for s in json.loads(plan.output)["pending"]] == list(
            range(10, len(MIGRATIONS) + 1)
        )
        assert json.loads(plan.output)["rows"] == 8

        def stop(done: int, total: int) -> None:
            raise KeyboardInterrupt  # the operator stops it after the first batch

        with pytest.raises(KeyboardInterrupt):
            store.upgrade(stop)
    with sqlite3.connect(path) as raw:
        assert raw.execute(f"SELECT count(*) FROM {rebuild.NEXT}").fetchone() == (3,)
    result = CliRunner().invoke(cli, ["store", "migrate", url])
    assert result.exit_code == 0, result.output
    assert "copied 3 of 5 rows" in result.output, "resumed after the 3 rows copied before the stop"
    assert "copied 5 of 5 rows" in result.output
    assert f"schema version {len(MIGRATIONS)}" in result.output
    with durability.open(url, settings=Settings()) as store:
        assert isinstance(store, SQLStore)
        check_upgraded(store)


def v15_entries(path: Path) -> dict[int, tuple[Any, ...]]:
    """Per seq, what version 15's tables say of the row (read with SQL, not the store)."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute(
            "SELECT c.seq, CASE WHEN o.seq IS NULL THEN 'synced' WHEN o.sync_error IS NOT NULL "
            "THEN 'quarantined' ELSE 'pending' END, o.sync_error, "
            "COALESCE(o.attempts, s.attempts, 0), "
            "CASE WHEN o.seq IS NULL THEN s.last_error ELSE o.last_error END, "
            "COALESCE(o.synced_at, s.synced_at) FROM durability_checkpoints c "
            "LEFT JOIN durability_outbox o ON o.seq = c.seq "
            "LEFT JOIN durability_synced s ON s.seq = c.seq"
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def test_a_sqlite_store_of_version_15_upgrades_to_outbox_rows_queued_in_batches(
    tmp_path: Path,
) -> None:
    """Version 16 drops the put's outbox trigger and starts the mark at the newest row: every
    outbox record of the release before survives, and a row put afterwards has no outbox row
    until the outbox is read, which shows it pending and queues it."""
    path = tmp_path / "v15.db"
    shutil.copy(FIXTURE_V15, path)
    expected = v15_entries(path)
    assert {seq: e[0] for seq, e in expected.items()} == {
        seq: e[0] for seq, e in expected_entries().items()
    }, "the fixture holds the v9 fixture's states"
    with durability.open(f"sqlite:///{path}", settings=Settings()) as store:
        assert isinstance(store, SQLStore)
        store.ready()
        with sqlite3.connect(path) as raw:
            triggers = raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            assert "durability_outbox_put" not in {name for (name,) in triggers}
            assert raw.execute(
                "SELECT value FROM durability_meta WHERE key = 'outbox_through'"
            ).fetchone() == ("8",)
        check_upgraded(store, expected)
        fresh = store.put(Checkpoint(thread_id="delta", checkpoint_id="d1", project_id="p1"))
        with sqlite3.connect(path) as raw:
            queued = "SELECT count(*) FROM durability_outbox WHERE seq = ?"
            assert raw.execute(queued, (fresh.seq,)).fetchone() == (0,), "the put wrote none"
            assert store.outbox.entries(thread_id="delta")[0].state == "pending"
            assert raw.execute(queued, (fresh.seq,)).fetchone() == (1,), "the read queued it"
