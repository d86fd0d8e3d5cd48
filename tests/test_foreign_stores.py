"""Read-only foreign stores, checked against stores written by the real fastaiagent SDK and LangGraph savers."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest
from conftest import LANGGRAPH_PG, fastaiagent_sdk
from langchain_core.messages import AIMessage

import durability
from durability import Checkpoint, PendingWrite
from durability.errors import ReadOnlyStoreError
from durability.settings import Settings
from durability.stores.foreign import parse_time

HERE = Path(__file__).resolve().parent
PG = LANGGRAPH_PG
SETTINGS = Settings(waiting_retention=timedelta(days=30))


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh Postgres schema, dropped afterwards."""
    from conftest import langgraph_pg_engine

    engine = langgraph_pg_engine()
    schema = f"foreign_{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    yield schema
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    engine.dispose()


def _digest(path: Path) -> dict[str, str]:
    """Hashes of the database file and of its WAL when that holds anything.

    A WAL reader needs the -wal and -shm files, and SQLite creates them empty when the owner
    has checkpointed them away; the -shm is shared memory every reader writes its read mark to.
    """
    files = [path, Path(f"{path}-wal")]
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if p.exists() and p.stat().st_size
    }


# ---------------------------------------------------------------------------- fastaiagent


def _check_fastaiagent(
    store: durability.stores.Store, written: dict[str, list[dict[str, Any]]]
) -> None:
    """What the store returns matches what the SDK wrote, row by row."""
    assert {r.thread_id for r in store.iter_threads()} == set(written)
    for eid, rows in written.items():
        history = store.history(eid)
        assert [c.checkpoint_id for c in history] == [r["checkpoint_id"] for r in rows]
        for cp, row in zip(history, rows, strict=True):
            assert (cp.node_id, cp.status, cp.step_type, cp.step, cp.runner) == (
                row["node_id"],
                row["status"],
                row["step_type"],
                row["node_index"],
                row["chain_name"],
            )
            assert cp.state == row["state_snapshot"]
            assert cp.interrupt_reason == row["interrupt_reason"]
            assert cp.created_at == parse_time(row["created_at"])
            assert cp.size_bytes
            assert cp.size_bytes > 0
        record = store.thread(eid)
        assert record is not None
        assert record.checkpoints == len(rows)
        assert record.size_bytes == sum(c.size_bytes or 0 for c in history)
    failed = store.latest("exec-failed")
    assert failed is not None
    assert failed.is_run_end
    assert failed.status == "failed"
    assert "payment gateway down" in failed.state["run_error"]
    done = store.latest("exec-resumed")
    assert done is not None
    assert done.is_run_end
    assert done.status == "completed"
    paused = store.latest("exec-paused")
    assert paused is not None
    assert (paused.status, paused.step_type) == ("interrupted", "hitl_pause")

    (park,) = store.parks()
    assert (park.thread_id, park.node_id, park.reason, park.context, park.runner) == (
        "exec-paused",
        "approve",
        "needs approval",
        {"order": "A-1"},
        "approvals",
    )
    assert park.checkpoint_id == paused.checkpoint_id
    assert park.deadline_source == "horizon", "the SDK records no deadline, and the park says so"
    assert park.created_at is not None
    assert park.deadline == park.created_at + SETTINGS.waiting_retention
    assert store.get_park("exec-paused") == park
    assert store.get_park("exec-failed") is None

    resumed = written["exec-resumed"]
    entries = {e.checkpoint_id: e for e in store.outbox(thread_id="exec-resumed")}
    assert entries[resumed[0]["checkpoint_id"]].state == "synced"
    quarantined = entries[resumed[1]["checkpoint_id"]]
    assert quarantined.state == "quarantined"
    assert "over the 1048576-byte cap" in (quarantined.sync_error or "")
    assert [e.checkpoint_id for e in store.outbox(state="quarantined")] == [
        resumed[1]["checkpoint_id"]
    ]
    assert len(store.outbox(state="pending")) == sum(len(r) for r in written.values()) - 2
    assert store.writes("exec-paused", paused.checkpoint_id) == []


def _check_refuses_writes(store: durability.stores.Store) -> None:
    """Every write refuses with ReadOnlyStoreError naming the store and saying it is read-only."""
    cp = Checkpoint(thread_id="exec-paused", node_id="x")
    attempts = [
        lambda: store.put(cp),
        lambda: store.put_many([cp]),
        lambda: store.put_writes(
            [
                PendingWrite(
                    thread_id="exec-paused", checkpoint_id="c", task_id="t", idx=0, channel="c"
                )
            ]
        ),
        lambda: store.delete_thread("exec-paused"),
        lambda: store.delete_checkpoints("exec-paused", [("", "c")]),
        lambda: store.set_status("exec-paused", "c", status="completed"),
        lambda: store.record_run_start("exec-paused", run_id="r", owner="o"),
        lambda: store.mark_finished("exec-paused"),
        lambda: store.unmark_finished("exec-paused"),
        lambda: store.acquire_lease("exec-paused", "me", timedelta(minutes=1)),
        lambda: store.park(cp, deadline=store.clock() + timedelta(days=1)),
        lambda: store.claim_park("exec-paused"),
        lambda: store.fetch_unsynced(),
        lambda: store.mark_synced([("exec-paused", 1)]),
        lambda: store.mark_quarantined({("exec-paused", 1): "x"}),
        lambda: store.release(),
        lambda: store.record_connection("p", "http://plane"),
        lambda: store.reset(),
    ]
    for attempt in attempts:
        with pytest.raises(ReadOnlyStoreError, match="is opened read-only") as info:
            attempt()
        assert store.provider.split("-")[0] in str(info.value)


@pytest.fixture(scope="module")
def fastaiagent_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A local.db written by the fastaiagent SDK in a subprocess, and what the SDK says it wrote."""
    work = tmp_path_factory.mktemp("fastaiagent")
    db = work / "local.db"
    return db, json.loads(fastaiagent_sdk("sqlite", str(db), cwd=work))


def test_fastaiagent_sqlite_maps_what_the_sdk_wrote(
    fastaiagent_db: tuple[Path, dict[str, Any]],
) -> None:
    """A fastaiagent local.db reads as threads, checkpoints, run ends, parks and outbox states; the file stays byte-identical."""
    db, written = fastaiagent_db
    before = _digest(db)
    with durability.open(f"fastaiagent+sqlite:///{db}", settings=SETTINGS) as store:
        _check_fastaiagent(store, written)
        _check_refuses_writes(store)
        assert store.latest("exec-paused").project_id  # type: ignore[union-attr]
    assert _digest(db) == before


def test_a_fastaiagent_store_copies_into_a_durability_store(
    fastaiagent_db: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """durability.copy from the SDK's local.db: every thread, run end and status kept, ids in order."""
    db, _ = fastaiagent_db
    source = tmp_path / "local.db"
    shutil.copy(db, source)
    dst = f"sqlite:///{tmp_path / 'copy.db'}"
    with durability.open(f"fastaiagent+sqlite:///{source}", settings=SETTINGS) as src:
        result = durability.copy(src, dst)
        with durability.open(dst) as copied:
            for record in src.iter_threads():
                mine = copied.history(record.thread_id)
                theirs = src.history(record.thread_id)
                assert [(c.checkpoint_id, c.status, c.step_type, c.state) for c in mine] == [
                    (c.checkpoint_id, c.status, c.step_type, c.state) for c in theirs
                ]
    assert result.checkpoints > 0


def test_fastaiagent_sqlite_reads_beside_a_live_sdk(
    fastaiagent_db: tuple[Path, dict[str, Any]],
) -> None:
    """While the SDK writes in another process the reader keeps reading; neither fails, and a quiet file stays byte-identical."""
    db, _ = fastaiagent_db
    writer = subprocess.Popen(
        [sys.executable, str(HERE / "fastaiagent_runs.py"), "sqlite", str(db), "loop", "40"],
        cwd=db.parent,
        stderr=subprocess.PIPE,
        text=True,
    )
    reads = 0
    with durability.open(f"fastaiagent+sqlite:///{db}", settings=SETTINGS) as store:
        while writer.poll() is None or reads < 5:
            assert len(store.history("exec-resumed")) == 4
            store.threads(limit=1000)
            reads += 1
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err[-2000:]
        assert sum(1 for r in store.iter_threads() if r.thread_id.startswith("exec-loop-")) == 40
        quiet = _digest(db)
        store.history("exec-loop-39")
        store.outbox()
    assert _digest(db) == quiet


def test_fastaiagent_postgres_maps_what_the_sdk_wrote(pg_schema: str, tmp_path: Path) -> None:
    """A fastaiagent Postgres schema reads like its SQLite twin (seq by created_at, no project ids)."""
    written = json.loads(fastaiagent_sdk("postgres", PG, pg_schema, cwd=tmp_path))
    with durability.open(
        f"fastaiagent+{LANGGRAPH_PG}?schema={pg_schema}",
        settings=SETTINGS,
    ) as store:
        _check_fastaiagent(store, written)
        _check_refuses_writes(store)


def test_a_database_of_another_kind_is_refused(tmp_path: Path) -> None:
    """A file that is not a fastaiagent or LangGraph store, or no file at all, is refused by name."""
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE unrelated (x)").connection.commit()
    for url in (f"fastaiagent+sqlite:///{other}", f"langgraph+sqlite:///{other}"):
        with (
            durability.open(url) as store,
            pytest.raises(durability.errors.StoreError, match="has no"),
        ):
            store.latest("t")
    with pytest.raises(durability.errors.ConfigError, match="is not a file"):
        durability.open(f"langgraph+sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()


# ---------------------------------------------------------------------------- LangGraph


@dataclass
class Customer:
    """A class LangGraph's strict mode will not construct."""

    name: str
    tier: str


def _run_langgraph(saver: Any) -> None:
    """Threads on a real LangGraph saver: one waiting on an interrupt, one resumed, one with a blocked type."""
    lg.start(saver, "waiting")
    lg.start(saver, "done")
    lg.resume_sync(saver, "done", "yes")
    cp = {
        "v": 4,
        "id": "1f000000-0000-6000-8000-000000000001",
        "ts": "2026-01-05T09:00:00+00:00",
        "channel_values": {"customer": Customer("Ada", "gold"), "n": 1},
        "channel_versions": {"customer": "1", "n": "1"},
        "versions_seen": {},
        "updated_channels": None,
    }
    saver.put(
        {"configurable": {"thread_id": "blocked", "checkpoint_ns": ""}},
        cp,
        {"source": "loop", "step": 0, "parents": {}},
        {"customer": "1", "n": "1"},
    )


def _check_langgraph(store: durability.stores.Store, saver: Any) -> None:
    """Threads, statuses, nodes, values and writes match the saver's own view."""
    assert {r.thread_id for r in store.iter_threads()} == {"waiting", "done", "blocked"}
    waiting = store.latest("waiting")
    assert waiting is not None
    assert (
        waiting.status,
        waiting.node_id,
        waiting.step,
        waiting.run_id,
    ) == ("interrupted", "draft,price", 1, "run-start")
    assert waiting.interrupt_context["interrupts"][0]["value"] == {
        "question": "Approve the refund?",
        "amount": Decimal("12.50"),
    }
    assert store.parks is None, "a LangGraph interrupt is a waiting thread, not a park"
    own = saver.get_tuple({"configurable": {"thread_id": "done"}})
    done = store.history("done")
    assert [c.status for c in done] == ["completed"] * 4
    assert [c.node_id for c in done] == [
        "__input__",
        "__start__",
        "draft,price",
        "approve",
    ]
    assert done[-1].checkpoint_id == own.config["configurable"]["checkpoint_id"]
    assert done[-1].state["amount"] == Decimal("12.50")
    assert isinstance(done[-1].state["messages"][1], AIMessage)
    assert done[-1].state == dict(own.checkpoint["channel_values"].items())
    assert (
        done[-1].metadata["__langgraph__"]["channel_versions"] == own.checkpoint["channel_versions"]
    )
    writes = store.writes("waiting", waiting.checkpoint_id)
    assert {w.channel for w in writes} >= {"__interrupt__"}
    blocked = store.latest("blocked")
    assert blocked is not None
    assert blocked.metadata["unrevivable"] == [
        {"path": "state.customer", "types": [f"{__name__}.Customer"]}
    ]
    assert blocked.state["n"] == 1
    assert not isinstance(blocked.state["customer"], Customer)
    record = store.thread("done")
    assert record is not None
    assert record.checkpoints == 4
    assert record.size_bytes > 0
    _check_refuses_writes(store)


@contextmanager
def langgraph_sqlite_unchanged(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A SqliteSaver file :func:`_run_langgraph` wrote: its store URL and the saver; on the way
    out, asserts that nothing the block did changed the file."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "checkpoints.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    _run_langgraph(saver)
    before = _digest(db)
    yield f"langgraph+sqlite:///{db}", saver
    assert _digest(db) == before
    conn.close()


def test_langgraph_sqlite_maps_what_the_saver_wrote(tmp_path: Path) -> None:
    """A SqliteSaver file reads with LangGraph's strict serializer; blocked values are named, the file unchanged."""
    with langgraph_sqlite_unchanged(tmp_path) as (url, saver), durability.open(url) as store:
        _check_langgraph(store, saver)


def test_langgraph_postgres_maps_what_the_saver_wrote(pg_schema: str) -> None:
    """A PostgresSaver schema (values in blobs, primitives inline) reads the same way."""
    from langgraph.checkpoint.postgres import PostgresSaver

    dsn = f"{PG}?options=-csearch_path%3D{pg_schema}"
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        _run_langgraph(saver)
        with durability.open(f"langgraph+{LANGGRAPH_PG}?schema={pg_schema}") as store:
            _check_langgraph(store, saver)
