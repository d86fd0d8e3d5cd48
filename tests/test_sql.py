"""What is particular to the SQL store: migrations, the format check, options, error mapping."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sql_support import assert_rows_kept, blank_row, write_version_1_store

import durability
from durability import Checkpoint
from durability._util import redact_url
from durability.errors import (
    CheckpointStoreFormatError,
    ConfigError,
    StoreError,
    StoreUnavailable,
)
from durability.settings import Settings
from durability.stores.sql import SQLStore
from durability.stores.sql.engine import enable_wal
from durability.stores.sql.migrations import MIGRATIONS, migrate
from durability.stores.sql.schema import (
    checkpoint_key,
    checkpoint_table,
    meta_table,
    thread_key,
    write_key,
    writes,
)


def open_sqlite(path: Path, **options: object) -> SQLStore:
    store = durability.open(f"sqlite:///{path}", settings=Settings(), **options)
    assert isinstance(store, SQLStore)
    return store


def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    """Every migration is applied once and recorded; setting up again changes nothing."""
    with open_sqlite(tmp_path / "m.db") as store:
        store.ready()
        assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))
        store._setup()
        assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))


def test_a_connection_record_from_before_version_6_survives_the_upgrade(tmp_path: Path) -> None:
    """Version 6 adds ``disconnected_at``: an older store's record reads as open and can be closed."""
    path = tmp_path / "v5.db"
    with open_sqlite(path) as store:
        store.record_connection("p", "http://plane.example")
    with sqlite3.connect(path) as raw:  # the store as version 5 left it
        raw.execute("ALTER TABLE durability_connections DROP COLUMN disconnected_at")
        raw.execute("DELETE FROM durability_migrations WHERE version = 6")
    with open_sqlite(path) as store:
        [record] = store.connections()
        assert (record.project_id, record.open) == ("p", True)
        store.record_disconnection("p")
        assert not store.connections()[0].open
        assert store.replicates
        assert store.applied_migrations() == list(range(1, len(MIGRATIONS) + 1))


def test_a_store_from_before_version_7_upgrades_to_thread_first_keys(tmp_path: Path) -> None:
    """A store at version 6 (hash-only key indexes) upgrades through thread-first keys to the
    rebuilt table of version 15; rows, reads and uniqueness stay, no old index is left."""
    path = tmp_path / "v6.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        migrate(conn, 0, until=6)
        conn.execute(meta_table.insert().values(key="format_generation", value="1"))
        conn.execute(
            checkpoint_table(sa.MetaData(), outbox=True)
            .insert()
            .values(
                **blank_row(
                    tkey=thread_key("t"),
                    ckey=checkpoint_key("t", "", "c1"),
                    thread_id="t",
                    checkpoint_id="c1",
                    status="completed",
                    synced=True,
                    attempts=0,
                )
            )
        )
        conn.execute(
            writes.insert().values(
                wkey=write_key("t", "", "c1", "k", 0),
                tkey=thread_key("t"),
                ckey=checkpoint_key("t", "", "c1"),
                thread_id="t",
                namespace="",
                checkpoint_id="c1",
                task_id="k",
                idx=0,
                channel="x",
                value="1",
                task_path="",
            )
        )
    engine.dispose()
    with open_sqlite(path) as store:
        assert_rows_kept(store)
    with sqlite3.connect(path) as raw:
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"ix_durability_checkpoints_ids", "ix_durability_writes_key"} <= indexes
    assert not indexes & {
        "ix_durability_checkpoints_key",
        "ix_durability_checkpoints_ckey",
        "ix_durability_checkpoints_by_id",
        "ix_durability_writes_ckey",
        "ix_durability_writes_thread",
    }


def test_outbox_migration_marks_existing_rows_synced(tmp_path: Path) -> None:
    """Rows written before the outbox existed count as already replicated."""
    path = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        write_version_1_store(conn)
    engine.dispose()
    with open_sqlite(path) as store:
        store.put(Checkpoint(thread_id="new-thread"))
        states = {e.thread_id: e.state for e in store.outbox()}
        assert states == {"old-thread": "synced", "new-thread": "pending"}
        assert [c.thread_id for c in store.fetch_unsynced()] == ["new-thread"]


def test_checkpoints_without_a_generation_are_refused(tmp_path: Path) -> None:
    """A store that holds checkpoints but records no generation is refused."""
    path = tmp_path / "g.db"
    with open_sqlite(path) as store:
        store.put(Checkpoint(thread_id="t"))
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(meta_table.delete())
    engine.dispose()
    with (
        open_sqlite(path) as store,
        pytest.raises(CheckpointStoreFormatError, match="records no format generation"),
    ):
        store.history("t")


def test_a_store_nobody_uses_is_never_touched(tmp_path: Path) -> None:
    """Opening a store reads and writes nothing until it is first used."""
    path = tmp_path / "lazy.db"
    store = open_sqlite(path)
    store.close()
    assert not path.exists()


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("sqlite:///", {}, "give a file path"),
        ("sqlite:///x.db", {"schema": "s"}, "no schemas"),
        ("sqlite:///x.db", {"synchronous": "sometimes"}, "synchronous"),
        ("postgresql://u@h/db", {"schema": "bad-name;"}, "plain SQL identifier"),
        ("postgresql://u@h/db", {"single_worker": True}, "single_worker"),
        ("nosuch://x", {}, "unknown scheme"),
        ("memory://", {"single_worker": True}, "memory provider takes no option 'single_worker'"),
        (
            "sqlite:///x.db",
            {"prefix": "p"},
            "no option 'prefix'; its options are allow_plaintext, busy_timeout_ms",
        ),
        (
            "redis://localhost",
            {"schema": "s"},
            "no option 'schema'; its options are allow_plaintext, client",
        ),
        ("not a url", {}, "give a URL"),
    ],
)
def test_bad_options_are_refused_clearly(
    url: str, options: dict[str, object], message: str
) -> None:
    """A bad URL or option is refused at open, naming it."""
    with pytest.raises(ConfigError, match=message):
        durability.open(url, settings=Settings(), **options)


def test_passwords_never_appear(tmp_path: Path) -> None:
    """A password in the URL is masked in reprs and messages."""
    assert (
        redact_url("postgresql+psycopg://me:s3cret@db.example/x")
        == "postgresql+psycopg://me:***@db.example/x"
    )
    store = durability.open("postgresql+psycopg://me:s3cret@127.0.0.1:1/nodb", settings=Settings())
    assert "s3cret" not in repr(store)
    with pytest.raises(StoreUnavailable) as info:
        store.latest("t")
    assert "s3cret" not in str(info.value)
    assert "unavailable" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_passwords_in_the_query_never_appear() -> None:
    """libpq and redis-py also take a password as a query parameter: masked there too."""
    url = "postgresql+psycopg://me@127.0.0.1:1/nodb?sslmode=disable&password=s3cret"
    assert redact_url(url) == (
        "postgresql+psycopg://me@127.0.0.1:1/nodb?sslmode=disable&password=***"
    )
    assert redact_url("redis://h:1/0?password=s3cret&prefix=p") == (
        "redis://h:1/0?password=***&prefix=p"
    )
    store = durability.open(url, settings=Settings())
    assert "s3cret" not in repr(store)
    with pytest.raises(StoreUnavailable) as info:
        store.latest("t")
    assert "s3cret" not in str(info.value)


def test_sqlite_synchronous_option(tmp_path: Path) -> None:
    """synchronous=FULL is applied to every connection; NORMAL is the default."""
    for option, expected in ((None, 1), ("FULL", 2)):
        kwargs = {} if option is None else {"synchronous": option}
        with open_sqlite(tmp_path / f"s{expected}.db", **kwargs) as store:
            store.ready()
            with store.db.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == expected
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def _open_in_wal(path: str, start: object, results: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    start.wait()  # type: ignore[attr-defined]
    try:
        enable_wal(conn.cursor(), 30)
        results.put(conn.execute("PRAGMA journal_mode").fetchone()[0])  # type: ignore[attr-defined]
    except sqlite3.Error as exc:
        results.put(repr(exc))  # type: ignore[attr-defined]


def test_processes_opening_a_new_file_together_all_get_wal(tmp_path: Path) -> None:
    """Switching a new file to WAL answers "locked" at once to all but one opener (no busy
    handler): every opener of the store waits its turn instead of failing."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(20):
        path = str(tmp_path / f"race-{round_}.db")
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t (x)")
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_open_in_wal, args=(path, start, results)) for _ in range(6)]
        for proc in procs:
            proc.start()
        start.set()
        for proc in procs:
            proc.join(60)
        assert [results.get(timeout=10) for _ in procs] == ["wal"] * 6


def test_a_changed_schema_is_reported_with_what_to_check(tmp_path: Path) -> None:
    """A table someone dropped fails the read naming the action and what to do next."""
    path = tmp_path / "dropped.db"
    with open_sqlite(path) as store:
        store.put(Checkpoint(thread_id="t"))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE durability_checkpoints")
    with open_sqlite(path) as store, pytest.raises(StoreError) as info:
        store.latest("t")
    message = str(info.value)
    assert message.startswith("cannot read the latest checkpoint")
    assert "durability_checkpoints" in message
    assert "`durability store reset URL` recreates them" in message


def test_thread_keys_are_kept_for_short_ids_only_and_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read hashes a short thread id once; long ids are hashed each time and the kept keys
    never exceed the bound (then they start over). Every key equals ``thread_key``."""
    from durability.stores.sql import statements

    monkeypatch.setattr(statements, "_CACHED_KEYS", 3)
    with open_sqlite(tmp_path / "k.db") as store:
        long_id = "x" * (statements._CACHED_ID_LENGTH + 1)
        for thread_id in ("a", "b", long_id, "c"):
            store.put(Checkpoint(thread_id=thread_id, state={"t": thread_id}))
            latest = store.latest(thread_id)
            assert latest is not None
            assert latest.state == {"t": thread_id}
            assert store.sql.thread_key(thread_id) == thread_key(thread_id)
        assert set(store.sql._thread_keys) == {"a", "b", "c"}
        store.latest("d")  # a fourth short id: the kept keys start over
        assert set(store.sql._thread_keys) == {"d"}
