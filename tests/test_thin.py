"""Thinning: older history dropped, every thread still resumable (real LangGraph savers)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest
from conftest import LANGGRAPH_PG

import durability
from durability.errors import ReadOnlyStoreError
from durability.model import Checkpoint
from durability.settings import Settings
from durability.sweep.thin import plan_thin, thin, thin_vs_delete


def _saver(path: Path) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    return saver


def _delta_thread(saver: Any) -> None:
    """A thread whose metadata marks delta channels, written through the saver's own put."""
    from langgraph.checkpoint.base import empty_checkpoint

    config: dict[str, Any] = {"configurable": {"thread_id": "delta", "checkpoint_ns": ""}}
    for step in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": step}
        cp["channel_versions"] = {"n": step + 1}
        meta = {"source": "loop", "step": step, "counters_since_delta_snapshot": {"n": step}}
        config = saver.put(config, cp, meta, {"n": step + 1})


def test_thinning_a_langgraph_store_leaves_every_thread_resumable(tmp_path: Path) -> None:
    """keep_latest=1 on a SqliteSaver file: one checkpoint per namespace left, graphs resume."""
    db = tmp_path / "checkpoints.db"
    saver = _saver(db)
    lg.start(saver, "waiting")
    lg.start(saver, "done")
    lg.resume_sync(saver, "done", "yes")
    _delta_thread(saver)
    before = {
        t: len(list(saver.list({"configurable": {"thread_id": t}})))
        for t in ("waiting", "done", "delta")
    }
    url = f"langgraph+sqlite:///{db}"
    with durability.open(url) as store:
        plan = plan_thin(store, keep_latest=1)
        with pytest.raises(ReadOnlyStoreError, match="writable=true"):
            thin(store, keep_latest=1)
    rows = {r.thread_id: r for r in plan.rows}
    assert rows["delta"].action == "refused"
    assert "DeltaChannel" in rows["delta"].reason
    assert rows["waiting"].dropped == before["waiting"] - 1
    with durability.open(f"{url}?writable=true") as store:
        result = thin(store, keep_latest=1)
    assert result.removed.keys() == {"waiting", "done"}
    after = {t: len(list(saver.list({"configurable": {"thread_id": t}}))) for t in before}
    assert after == {"waiting": 1, "done": 1, "delta": before["delta"]}
    assert lg.resume_sync(saver, "waiting", "no")["decision"] == "no"
    state = lg.build(saver).get_state({"configurable": {"thread_id": "done"}})
    assert state.values["decision"] == "yes"
    assert state.next == ()
    saver.conn.close()


def test_thinning_a_durability_store_keeps_what_a_resume_needs(tmp_path: Path) -> None:
    """keep_latest=1 keeps the step before a failed run's end; newer_than keeps recent rows."""
    with durability.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        cps = [Checkpoint(thread_id="t", checkpoint_id=f"c{i}", step=i) for i in range(5)]
        cps.append(
            Checkpoint(thread_id="t", checkpoint_id="end", step_type="run_end", status="failed")
        )
        store.put_many(cps)
        plan = plan_thin(store, keep_latest=1)
        assert plan.drops["t"] == [("", "c0"), ("", "c1"), ("", "c2"), ("", "c3")]
        thin(store, keep_latest=1)
        assert [c.checkpoint_id for c in store.history("t")] == ["c4", "end"]
        frame = thin_vs_delete(store, keep_latest=1, settings=Settings())
        assert list(frame.columns) == [
            "thread_id",
            "action_sweep",
            "size_bytes",
            "delete_frees",
            "thin_frees",
        ]
        assert int(frame["thin_frees"].iloc[0]) == 0


def test_thinning_a_postgres_langgraph_store_drops_blobs_no_kept_checkpoint_references(
    pg_langgraph: tuple[str, Any],
) -> None:
    """PostgresSaver: thinned to the latest, the thread resumes and every blob left is referenced."""
    schema, saver = pg_langgraph
    lg.start(saver, "waiting")
    url = f"langgraph+{LANGGRAPH_PG}?schema={schema}&writable=true"
    with durability.open(url) as store:
        result = thin(store, keep_latest=1)
    assert result.removed["waiting"][0] > 0
    with saver.conn.cursor() as cur:
        left = cur.execute(
            f'SELECT count(*) AS n FROM "{schema}".checkpoint_blobs AS bl WHERE NOT EXISTS ('
            f'SELECT 1 FROM "{schema}".checkpoints AS cp WHERE cp.thread_id = bl.thread_id AND '
            "cp.checkpoint -> 'channel_versions' ->> bl.channel = bl.version)"
        ).fetchone()
    assert left["n"] == 0
    assert len(list(saver.list({"configurable": {"thread_id": "waiting"}}))) == 1
    assert lg.resume_sync(saver, "waiting", "no")["decision"] == "no"


def test_compact_gives_sqlite_space_back_and_needs_exclusive_access(tmp_path: Path) -> None:
    """After thinning, `store compact` shrinks the file; with a writer holding it, it refuses."""
    import json

    from click.testing import CliRunner

    from durability.cli import cli

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    with durability.open(url) as store:
        store.put_many(
            [
                Checkpoint(thread_id="t", checkpoint_id=f"c{i}", state={"x": "y" * 4000})
                for i in range(200)
            ]
        )
    runner = CliRunner()
    dry = runner.invoke(cli, ["store", "thin", url, "--keep-latest", "1", "--dry-run", "--json"])
    assert json.loads(dry.output)["checkpoints"] == 199
    done = runner.invoke(cli, ["store", "thin", url, "--keep-latest", "1", "--yes", "--json"])
    assert json.loads(done.output)["removed"]["checkpoints"] == 199
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    refused = runner.invoke(cli, ["store", "compact", url])
    assert refused.exit_code == 1
    assert "exclusive access" in refused.output
    holder.execute("ROLLBACK")
    holder.close()
    compacted = runner.invoke(cli, ["store", "compact", url, "--json"])
    assert compacted.exit_code == 0, compacted.output
    sizes = json.loads(compacted.output)
    assert sizes["after"] < sizes["before"] / 4
