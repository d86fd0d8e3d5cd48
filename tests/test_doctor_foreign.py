"""``durability doctor`` on other tools' stores (issue 20), read in place and read-only: a
LangGraph store's writes and blobs no checkpoint references, and a fastaiagent store's own
invariants and the rows its SDK's known bugs leave. Each store is written by the real tool.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from click.testing import CliRunner
from conftest import fastaiagent_sdk

import durability
from durability.cli import cli
from durability.doctor import diagnose
from tests import langgraph_graph as lg
from tests.conftest import POSTGRES_URL, make_target
from tests.test_doctor import SETTINGS


def _orphan_langgraph_rows(saver: Any) -> None:
    """A real graph run (whole), then writes against a checkpoint that does not exist."""
    lg.start(saver, "graph")
    saver.put_writes(
        {"configurable": {"thread_id": "gone", "checkpoint_ns": "", "checkpoint_id": "ghost"}},
        [("messages", "left behind")],
        task_id="task-1",
    )


def test_a_langgraph_sqlite_store_with_orphan_writes(tmp_path: Path) -> None:
    """A file SqliteSaver wrote: the graph's own thread is whole; the writes no checkpoint
    references are named; --fix refuses the read-only store."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "checkpoints.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    _orphan_langgraph_rows(SqliteSaver(conn))
    conn.close()
    url = f"langgraph+sqlite:///{db}"
    with durability.open(url) as store:
        [problem] = diagnose(store).problems
    assert (problem.check, problem.thread_id, problem.rows) == ("langgraph_unreferenced", "gone", 1)
    assert problem.keys == (("write", "", "ghost", "task-1", "0"),)
    fixed = CliRunner().invoke(cli, ["doctor", url, "--fix", "--yes"])
    assert fixed.exit_code == 1
    assert "read-only here" in fixed.output


def test_a_langgraph_postgres_store_with_orphan_blobs(tmp_path: Path) -> None:
    """A schema PostgresSaver wrote: blobs and writes left when their checkpoints were deleted
    by hand are named per thread; the whole thread reports nothing."""
    from langgraph.checkpoint.postgres import PostgresSaver

    for url in make_target("postgres", tmp_path):
        schema = url.url.split("schema=")[1].split("&")[0]
        with sa.create_engine(POSTGRES_URL).begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        server = POSTGRES_URL.split("://", 1)[1]  # the test database, whichever it is
        dsn = f"postgresql://{server}?options=-csearch_path%3D{schema}"
        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            lg.start(saver, "graph")
            lg.start(saver, "deleted")
            with saver._cursor() as cur:
                cur.execute("DELETE FROM checkpoints WHERE thread_id = 'deleted'")
        lg_url = f"langgraph+postgresql://{server}?schema={schema}"
        with durability.open(lg_url) as store:
            problems = diagnose(store).problems
        assert [(p.check, p.thread_id) for p in problems] == [("langgraph_unreferenced", "deleted")]
        kinds = {key[0] for key in problems[0].keys}
        assert kinds == {"write", "blob"}


def _fastaiagent_found(url: str) -> set[tuple[str, str | None, int]]:
    with durability.open(url, settings=SETTINGS) as store:
        problems = diagnose(store, now=datetime.now(UTC) + timedelta(hours=1)).problems
    return {(p.check, p.thread_id, p.rows) for p in problems}


FASTAIAGENT_BREAKS = {
    ("fastaiagent_run_end_quarantined", "exec-done", 1),
    ("fastaiagent_idempotency_without_execution", "exec-gone", 1),
}


def test_a_fastaiagent_sqlite_store_is_whole_until_the_sdks_bugs_leave_rows(
    tmp_path: Path,
) -> None:
    """A local.db the real SDK wrote (paused, resumed, failed runs; a row synced, one
    quarantined) reports nothing; the rows its known bugs leave, written through its own calls
    (a legacy row without checkpoint_id by hand), are each named; --fix refuses the store."""
    db = tmp_path / "local.db"
    url = f"fastaiagent+sqlite:///{db}"
    fastaiagent_sdk("sqlite", str(db), cwd=tmp_path)
    assert _fastaiagent_found(url) == set()
    fastaiagent_sdk("sqlite", str(db), "breaks", cwd=tmp_path)
    with sqlite3.connect(db) as conn:  # a legacy row: before schema v2, no checkpoint_id
        conn.execute(
            "UPDATE checkpoints SET checkpoint_id = NULL WHERE rowid = "
            "(SELECT min(rowid) FROM checkpoints WHERE execution_id = 'exec-paused')"
        )
    assert _fastaiagent_found(url) == FASTAIAGENT_BREAKS | {
        ("fastaiagent_outbox_stalled", "exec-nan", 1),
        ("fastaiagent_resent_forever", "exec-paused", 1),
        ("fastaiagent_created_at_misordered", "exec-times", 1),
    }
    fixed = CliRunner().invoke(cli, ["doctor", url, "--fix", "--yes"])
    assert fixed.exit_code == 1
    assert "read-only here" in fixed.output


def test_a_fastaiagent_postgres_store_is_whole_until_the_sdks_bugs_leave_rows(
    tmp_path: Path,
) -> None:
    """The same on a Postgres schema the real SDK wrote: its jsonb, its required checkpoint_id
    and its timestamptz rule out the SQLite-only breaks, which are skipped, named."""
    for target in make_target("postgres", tmp_path):
        schema = target.url.split("schema=")[1].split("&")[0]
        with sa.create_engine(POSTGRES_URL).begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        server = POSTGRES_URL.split("://", 1)[1]
        dsn = f"postgresql://{server}"
        fastaiagent_sdk("postgres", dsn, schema, cwd=tmp_path)
        url = f"fastaiagent+postgresql://{server}?schema={schema}"
        assert _fastaiagent_found(url) == set()
        fastaiagent_sdk("postgres", dsn, schema, "breaks", cwd=tmp_path)
        assert _fastaiagent_found(url) == FASTAIAGENT_BREAKS
        with durability.open(url, settings=SETTINGS) as store:
            skipped = diagnose(store).skipped
        assert skipped["fastaiagent_outbox_stalled"] == "not a fastaiagent SQLite store"
