"""Sweeping LangGraph stores in place, on stores the real SqliteSaver and PostgresSaver wrote."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest
from conftest import LANGGRAPH_PG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durability
from durability.errors import CheckpointStoreFormatError, ReadOnlyStoreError
from durability.settings import Settings
from durability.sweep import plan_sweep, sweep

SETTINGS = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))
THREADS = [f"t{i}" for i in range(6)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def lg_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SqliteSaver file: six threads waiting on an interrupt, two of them resumed to the end."""
    path = tmp_path_factory.mktemp("lg") / "checkpoints.db"
    saver = lg.sqlite_saver(path)
    for t in THREADS:
        lg.start(saver, t)
    for t in THREADS[:2]:
        lg.resume_sync(saver, t, "yes")
    saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    saver.conn.close()
    return path


@pytest.fixture
def lg_copy(lg_file: Path, tmp_path: Path) -> Path:
    target = tmp_path / "checkpoints.db"
    shutil.copy(lg_file, target)
    return target


def _counts(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as conn:
        return (
            conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0],
            conn.execute("SELECT count(*) FROM writes").fetchone()[0],
        )


def test_a_langgraph_store_opened_read_only_refuses_the_sweep_and_marks(lg_copy: Path) -> None:
    """Without writable=true: the plan works, the sweep and a mark refuse naming the fix, nothing changes."""
    before = _digest(lg_copy)
    later = datetime.now(UTC) + timedelta(days=365)
    with durability.open(f"langgraph+sqlite:///{lg_copy}", settings=SETTINGS) as store:
        assert len(plan_sweep(store, now=later).deletes()) == len(THREADS)
        with pytest.raises(ReadOnlyStoreError, match=r"writable=true"):
            sweep(store, now=later)
        with pytest.raises(ReadOnlyStoreError, match=r"cannot mark a thread finished.*writable"):
            store.mark_finished("t0")
    assert _digest(lg_copy) == before
    assert not Path(f"{lg_copy}.durability").exists()


def test_an_unknown_sqlite_schema_is_refused_before_any_delete(lg_copy: Path) -> None:
    """A writes table with a column this version does not know: refused, every row kept."""
    with sqlite3.connect(lg_copy) as conn:
        conn.execute("ALTER TABLE writes ADD COLUMN shard INTEGER")
    before = _counts(lg_copy)
    later = datetime.now(UTC) + timedelta(days=365)
    url = f"langgraph+sqlite:///{lg_copy}?writable=true"
    with (
        durability.open(url, settings=SETTINGS) as store,
        pytest.raises(CheckpointStoreFormatError, match=r"schema .*does not know.*shard"),
    ):
        sweep(store, now=later)
    assert _counts(lg_copy) == before


def test_marks_in_the_sidecar_give_the_finished_horizon(lg_copy: Path) -> None:
    """A mark through the usual API lands in the sidecar file; LangGraph's tables keep their shape."""
    url = f"langgraph+sqlite:///{lg_copy}?writable=true"
    with sqlite3.connect(lg_copy) as conn:
        schema = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    with durability.open(url, settings=SETTINGS) as store:
        store.record_run_start("t0", run_id="r1", owner="billing")
        record = store.mark_finished("t0")
        assert record.owner == "billing"
        assert record.checkpoints > 0
        soon = datetime.now(UTC) + timedelta(days=8)
        plan = plan_sweep(store, now=soon)
        assert [r.thread_id for r in plan.deletes()] == ["t0"]
        assert plan.deletes()[0].horizon == "finished"
        assert "no finished marks" not in " ".join(plan.summary()["notes"])
        result = sweep(store, now=soon)
        assert result.deleted_ids() == ["t0"]
        assert store.thread("t0") is None  # the sidecar's record went with the thread
        assert plan_sweep(store, now=soon).deletes() == ()
    assert Path(f"{lg_copy}.durability").is_file()
    with sqlite3.connect(lg_copy) as conn:
        assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
        assert conn.execute("SELECT count(*) FROM writes WHERE thread_id = 't0'").fetchone() == (0,)


def test_a_plan_without_marks_says_only_the_waiting_horizon_applies(lg_copy: Path) -> None:
    """No sidecar yet: the plan's notes say the finished horizon has nothing to go on."""
    with durability.open(f"langgraph+sqlite:///{lg_copy}", settings=SETTINGS) as store:
        notes = plan_sweep(store).summary()["notes"]
    assert any("no finished marks" in n and "waiting horizon" in n for n in notes)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    days=st.integers(min_value=-2, max_value=60),
    waiting=st.integers(min_value=1, max_value=40),
    marked=st.sets(st.sampled_from(THREADS)),
    batch=st.integers(min_value=1, max_value=7),
)
def test_the_sweep_deletes_exactly_what_the_plan_says(
    lg_file: Path, tmp_path: Path, days: int, waiting: int, marked: set[str], batch: int
) -> None:
    """plan == sweep on a real SqliteSaver store, whatever the time, retention, marks and batch."""
    path = tmp_path / f"{uuid.uuid4().hex}.db"
    shutil.copy(lg_file, path)
    config = Settings(
        waiting_retention=timedelta(days=waiting), finished_retention=timedelta(days=3)
    )
    now = datetime.now(UTC) + timedelta(days=days)
    with durability.open(f"langgraph+sqlite:///{path}?writable=true", settings=config) as store:
        for t in sorted(marked):
            store.mark_finished(t)
        plan = plan_sweep(store, now=now)
        result = sweep(store, now=now, batch_size=batch)
        going = {r.thread_id for r in plan.deletes()}
        assert set(result.deleted_ids()) == going
        assert result.checkpoints() == sum(r.checkpoints for r in plan.deletes())
        left = {r.thread_id for r in store.iter_threads() if r.checkpoints}
    assert left == set(THREADS) - going
    with sqlite3.connect(path) as conn:
        kept = {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM writes")}
    assert kept <= set(THREADS) - going


def test_a_sweep_beside_a_live_langgraph_writer_never_times_it_out(lg_copy: Path) -> None:
    """A graph keeps writing to the file (1 s busy timeout) while the sweep deletes 120 threads."""
    saver = lg.sqlite_saver(lg_copy)
    for i in range(120):
        lg.start(saver, f"old-{i}")
    saver.conn.close()
    errors: list[BaseException] = []
    written: list[str] = []
    stop = threading.Event()

    def live() -> None:
        writer = lg.sqlite_saver(lg_copy, timeout=1.0)
        try:
            while not stop.is_set():
                thread = f"live-{len(written)}"
                lg.start(writer, thread)
                written.append(thread)
        except BaseException as exc:
            errors.append(exc)
        finally:
            writer.conn.close()

    runner = threading.Thread(target=live)
    runner.start()
    try:
        later = datetime.now(UTC) + timedelta(days=365)
        url = f"langgraph+sqlite:///{lg_copy}?writable=true"
        with durability.open(url, settings=SETTINGS) as store:
            plan = plan_sweep(store, now=later)
            result = sweep(store, now=later, batch_size=20)
    finally:
        stop.set()
        runner.join()
    assert errors == []
    assert written
    # The sweep plans again under its lock: live threads written since may be due too.
    assert {r.thread_id for r in plan.deletes()} <= set(result.deleted_ids())
    assert {t for t in result.deleted_ids() if not t.startswith("live-")} == {
        r.thread_id for r in plan.deletes() if not r.thread_id.startswith("live-")
    }
    with sqlite3.connect(lg_copy) as conn:
        left = {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    assert not any(t.startswith("old-") for t in left)


# ---------------------------------------------------------------------------- Postgres


def _pg_rows(saver: Any, schema: str) -> dict[str, int]:
    with saver.conn.cursor() as cur:
        return {
            t: cur.execute(f'SELECT count(*) AS n FROM "{schema}".{t}').fetchone()["n"]
            for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        }


def test_a_postgres_sweep_removes_checkpoints_blobs_and_writes_orphans_included(
    pg_langgraph: tuple[str, Any],
) -> None:
    """Due threads lose every row in the three tables, a blob no checkpoint references too."""
    schema, saver = pg_langgraph
    for t in ("a", "b", "keep"):
        lg.start(saver, t)
    with saver.conn.cursor() as cur:
        cur.execute(
            f'INSERT INTO "{schema}".checkpoint_blobs VALUES (%s, %s, %s, %s, %s, %s)',
            ("a", "", "orphan", "999", "bytes", b"left behind"),
        )
    url = f"langgraph+{LANGGRAPH_PG}?schema={schema}&writable=true"
    with durability.open(url, settings=SETTINGS) as store:
        store.record_run_start("keep", run_id="r", owner="ops")
        for t in ("a", "b"):
            store.mark_finished(t)
        soon = datetime.now(UTC) + timedelta(days=8)
        result = sweep(store, now=soon)
    assert sorted(result.deleted_ids()) == ["a", "b"]
    with saver.conn.cursor() as cur:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            found = cur.execute(f'SELECT DISTINCT thread_id FROM "{schema}".{table}').fetchall()
            assert {r["thread_id"] for r in found} == {"keep"}


def test_an_unknown_postgres_migration_level_is_refused_before_any_delete(
    pg_langgraph: tuple[str, Any],
) -> None:
    """A checkpoint_migrations level above the known ones: refused, every row kept."""
    schema, saver = pg_langgraph
    lg.start(saver, "a")
    with saver.conn.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".checkpoint_migrations VALUES (42)')
    before = _pg_rows(saver, schema)
    url = f"langgraph+{LANGGRAPH_PG}?schema={schema}&writable=true"
    later = datetime.now(UTC) + timedelta(days=365)
    with (
        durability.open(url, settings=SETTINGS) as store,
        pytest.raises(CheckpointStoreFormatError, match=r"checkpoint_migrations level is 42"),
    ):
        sweep(store, now=later)
    assert _pg_rows(saver, schema) == before


def test_a_postgres_store_without_writable_refuses_the_sweep(pg_langgraph: tuple[str, Any]) -> None:
    """No explicit opt-in: refused naming the fix, nothing deleted, no sidecar schema created."""
    schema, saver = pg_langgraph
    lg.start(saver, "a")
    before = _pg_rows(saver, schema)
    url = f"langgraph+{LANGGRAPH_PG}?schema={schema}"
    with (
        durability.open(url, settings=SETTINGS) as store,
        pytest.raises(ReadOnlyStoreError, match=r"writable=true"),
    ):
        sweep(store, now=datetime.now(UTC) + timedelta(days=365))
    assert _pg_rows(saver, schema) == before
    with saver.conn.cursor() as cur:
        found = cur.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
            (f"{schema}_durability",),
        ).fetchall()
    assert found == []
