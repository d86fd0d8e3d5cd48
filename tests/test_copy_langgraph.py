"""Copying threads *into* LangGraph stores, through the real SqliteSaver and PostgresSaver."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest
import sqlalchemy as sa

import durability
from durability.errors import CopyRefused, ReadOnlyStoreError
from durability.langgraph import DurabilitySaver
from durability.model import Checkpoint
from durability.transfer import plan_copy


def _empty_langgraph_store(path: Path) -> None:
    """A LangGraph SQLite store with its tables and no checkpoint."""
    lg.sqlite_saver(path).conn.close()


def _end_the_run(source: durability.stores.Store, thread_id: str) -> str:
    """Put a run end after the thread's newest checkpoint; return that checkpoint's id."""
    last = source.newest_first(thread_id, "", limit=1)[0]
    source.put(
        Checkpoint(
            thread_id=thread_id,
            checkpoint_id="zz-end",
            parent_checkpoint_id=last.checkpoint_id,
            step_type="run_end",
        )
    )
    return last.checkpoint_id


def _history(saver: Any, thread_id: str) -> list[tuple[Any, ...]]:
    graph = lg.build(saver)
    return [
        (
            s.config["configurable"]["checkpoint_id"],
            (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            s.values,
            s.next,
            s.metadata,
            [(t.id, t.name, [i.value for i in t.interrupts]) for t in s.tasks],
        )
        for s in graph.get_state_history({"configurable": {"thread_id": thread_id}})
    ]


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "messages": [(type(m).__name__, m.content) for m in values["messages"]]}


@pytest.fixture
def source(tmp_path: Path) -> Iterator[durability.stores.Store]:
    """A durability store a real graph ran on: ``waiting`` on an interrupt, ``done`` resumed,
    ``done`` marked finished in the ledger."""
    with durability.open(f"sqlite:///{tmp_path / 'ours.db'}") as store:
        saver = DurabilitySaver(store)
        lg.start(saver, "waiting")
        lg.start(saver, "done")
        lg.resume_sync(saver, "done", "yes")
        store.record_run_start("done", run_id="r1", owner="billing")
        store.mark_finished("done")
        yield store


@pytest.fixture
def pg_langgraph() -> Iterator[tuple[str, Any]]:
    """An empty schema set up by the real PostgresSaver: (langgraph+postgresql URL, saver)."""
    from conftest import POSTGRES_URL, postgres_admin
    from langgraph.checkpoint.postgres import PostgresSaver

    engine: Any = postgres_admin()
    schema = f"lgcopy_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    plain = sa.make_url(POSTGRES_URL).set(drivername="postgresql")
    conninfo = plain.render_as_string(hide_password=False)
    try:
        with PostgresSaver.from_conn_string(f"{conninfo}?options=-csearch_path%3D{schema}") as s:
            s.setup()
            url = plain.set(drivername="langgraph+postgresql").render_as_string(hide_password=False)
            yield f"{url}?schema={schema}&writable=true", s
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}_durability" CASCADE')
        engine.dispose()


def _continues(ours: Any, theirs: Any) -> None:
    """Both stores hold the same histories, and the waiting thread resumes the same on both."""
    for thread in ("done", "waiting"):
        assert _history(theirs, thread) == _history(ours, thread)
    # The resumed run's new message gets a fresh id on each side: compared by content.
    assert _plain(lg.resume_sync(theirs, "waiting", "no")) == _plain(
        lg.resume_sync(ours, "waiting", "no")
    )
    assert len(_history(theirs, "waiting")) == len(_history(ours, "waiting"))


def test_a_stategraph_continues_on_a_langgraph_sqlite_store_copied_from_durability(
    source: durability.stores.Store, tmp_path: Path
) -> None:
    """durability SQLite → LangGraph SQLite through SqliteSaver: ids, parents, metadata, writes
    and interrupts as LangGraph reads them; the ledger in the sidecar; the graph resumes."""
    path = tmp_path / "lg.db"
    theirs = lg.sqlite_saver(path)
    result = durability.copy(source, f"langgraph+sqlite:///{path}?writable=true")
    assert sorted(result.copied) == ["done", "waiting"]
    assert result.checkpoints == len(source.history("done", None)) + len(
        source.history("waiting", None)
    )
    with durability.open(f"langgraph+sqlite:///{path}") as copied:
        record = copied.thread("done")
        assert record is not None
        ours = source.thread("done")
        assert ours is not None
        assert (record.owner, record.run_id, record.finished_at, record.due_at) == (
            "billing",
            "r1",
            ours.finished_at,
            ours.due_at,
        )
        assert (
            plan_copy(source, f"langgraph+sqlite:///{path}?writable=true").summary()["counts"][
                "skip"
            ]
            == 2
        )
    _continues(DurabilitySaver(source), theirs)
    theirs.conn.close()


def test_a_stategraph_continues_on_a_langgraph_postgres_store_copied_from_durability(
    source: durability.stores.Store, pg_langgraph: tuple[str, Any]
) -> None:
    """durability SQLite → LangGraph Postgres through PostgresSaver (blobs per channel version)."""
    url, theirs = pg_langgraph
    result = durability.copy(source, url)
    assert sorted(result.copied) == ["done", "waiting"]
    _continues(DurabilitySaver(source), theirs)


def test_a_copy_into_langgraph_killed_midway_finishes_when_run_again(
    source: durability.stores.Store, pg_langgraph: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in its second chunk (one transaction each): the rerun resumes and ends identical."""
    from durability.stores.foreign.langgraph_copy import LangGraphWriter

    url, theirs = pg_langgraph
    real, calls = LangGraphWriter.put_chunk, {"n": 0}

    def dies(self: Any, *args: Any) -> tuple[int, int]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return real(self, *args)

    monkeypatch.setattr(LangGraphWriter, "put_chunk", dies)
    with pytest.raises(KeyboardInterrupt):
        durability.copy(source, url, threads=["done"], chunk_size=2)
    monkeypatch.setattr(LangGraphWriter, "put_chunk", real)
    (row,) = plan_copy(source, url, threads=["done"]).rows
    assert (row.action, row.present) == ("resume", 2)
    durability.copy(source, url, threads=["done"], chunk_size=2)
    assert _history(theirs, "done") == _history(DurabilitySaver(source), "done")
    assert plan_copy(source, url, threads=["done"]).rows[0].action == "skip"


def test_what_langgraph_cannot_keep_is_refused_unless_dropped_on_purpose(
    source: durability.stores.Store, tmp_path: Path
) -> None:
    """A durability runner's thread is refused; a run end and a status LangGraph derives
    otherwise are named and refused, then dropped with lossy=True; nothing is written before."""
    path = tmp_path / "lg.db"
    _empty_langgraph_store(path)
    dst = f"langgraph+sqlite:///{path}?writable=true"
    source.put(Checkpoint(thread_id="runner", checkpoint_id="c0", state={"i": 1}))
    with pytest.raises(CopyRefused, match=r"'runner'.*not written by a LangGraph saver"):
        durability.copy(source, dst)
    source.set_status("done", _end_the_run(source, "done"), status="failed")
    plan = plan_copy(source, dst, threads=["done"])
    assert plan.rows[0].action == "refuse"
    assert "run end" in plan.rows[0].reason
    assert "status 'failed'" in plan.rows[0].reason
    with pytest.raises(CopyRefused, match=r"lossy=True"):
        durability.copy(source, dst, threads=["done", "waiting"])
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0
    result = durability.copy(source, dst, threads=["done"], lossy=True)
    assert result.checkpoints == len(source.history("done", None)) - 1
    assert "dropped: " in result.plan.rows[0].reason
    # Compared without the run end it dropped: copied, not to be resumed again.
    assert plan_copy(source, dst, threads=["done"], lossy=True).rows[0].action == "skip"


def test_a_langgraph_store_not_opened_writable_is_refused(
    source: durability.stores.Store, tmp_path: Path
) -> None:
    """Without ?writable=true the copy is refused naming the fix, the store unchanged."""
    path = tmp_path / "lg.db"
    _empty_langgraph_store(path)
    with pytest.raises(ReadOnlyStoreError, match=r"writable=true"):
        durability.copy(source, f"langgraph+sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0


@pytest.mark.parametrize(
    "bookkeeping",
    ["not a dict", ["a", "list"], 7, {"channel_versions": "x"}, {"versions_seen": "x"}],
)
def test_a_checkpoint_whose_metadata_mimics_langgraph_is_refused_not_crashed(
    tmp_path: Path, bookkeeping: object
) -> None:
    """A checkpoint whose metadata holds LangGraph's bookkeeping key as something else (any
    writer may put any metadata) is a checkpoint no LangGraph saver wrote: the thread is
    refused by name, nothing written."""
    path = tmp_path / "lg.db"
    _empty_langgraph_store(path)
    with durability.open(f"sqlite:///{tmp_path / 'src.db'}") as src:
        src.put(
            Checkpoint(
                thread_id="mimic",
                checkpoint_id="c0",
                step_type="langgraph",
                metadata={"__langgraph__": bookkeeping},
            )
        )
        with pytest.raises(CopyRefused, match=r"'mimic'.*not written by a LangGraph saver"):
            durability.copy(src, f"langgraph+sqlite:///{path}?writable=true")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0


def test_the_cli_names_what_langgraph_cannot_keep_and_copies_with_lossy(
    source: durability.stores.Store, tmp_path: Path
) -> None:
    """--dry-run shows the refusal's reason; --lossy --yes copies without the run end."""
    import json

    from click.testing import CliRunner

    from durability.cli import cli

    path = tmp_path / "lg.db"
    _empty_langgraph_store(path)
    _end_the_run(source, "done")
    src, dst = source.url, f"langgraph+sqlite:///{path}?writable=true"
    runner = CliRunner()
    dry = runner.invoke(cli, ["copy", src, dst, "--thread", "done", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    (row,) = json.loads(dry.output)["rows"]
    assert row["action"] == "refuse"
    assert "run end" in row["reason"]
    assert "--lossy" in row["reason"]
    refused = runner.invoke(cli, ["copy", src, dst, "--thread", "done", "--yes", "--json"])
    assert refused.exit_code != 0
    done = runner.invoke(cli, ["copy", src, dst, "--thread", "done", "--lossy", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["totals"]["checkpoints"] == len(source.history("done", None)) - 1
