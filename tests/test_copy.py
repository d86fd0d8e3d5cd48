"""Copying threads between stores: from real LangGraph savers' stores and durability stores."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest
from click.testing import CliRunner

import durability
from durability.cli import cli
from durability.errors import CopyRefused
from durability.langgraph import DurabilitySaver
from durability.model import Checkpoint, PendingWrite
from durability.transfer import plan_copy


@pytest.fixture(scope="module")
def lg_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SqliteSaver file: ``waiting`` on an interrupt, ``done`` resumed to its end."""
    path = tmp_path_factory.mktemp("lgcopy") / "checkpoints.db"
    saver = lg.sqlite_saver(path)
    lg.start(saver, "waiting")
    lg.start(saver, "done")
    lg.resume_sync(saver, "done", "yes")
    saver.conn.close()
    return path


def _history(saver: Any, thread_id: str) -> list[tuple[Any, ...]]:
    graph = lg.build(saver)
    return [
        (s.config["configurable"]["checkpoint_id"], s.values, s.next, s.metadata.get("step"))
        for s in graph.get_state_history({"configurable": {"thread_id": thread_id}})
    ]


def test_a_stategraph_continues_its_threads_after_its_store_is_copied(
    lg_file: Path, tmp_path: Path
) -> None:
    """LangGraph SQLite → durability SQLite: same history, and the waiting thread resumes the same."""
    source = tmp_path / "source.db"
    shutil.copy(lg_file, source)
    dst = f"sqlite:///{tmp_path / 'copy.db'}"
    result = durability.copy(f"langgraph+sqlite:///{source}", dst)
    assert sorted(result.copied) == ["done", "waiting"]
    saver = lg.sqlite_saver(source)
    with durability.open(dst) as store:
        ours = DurabilitySaver(store)
        for thread in ("done", "waiting"):
            assert _history(ours, thread) == _history(saver, thread)
        # The resumed run's new message gets a fresh id on each side: compared by content.
        assert _plain(lg.resume_sync(ours, "waiting", "no")) == _plain(
            lg.resume_sync(saver, "waiting", "no")
        )
        assert len(_history(ours, "waiting")) == len(_history(saver, "waiting"))
    saver.conn.close()


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "messages": [(type(m).__name__, m.content) for m in values["messages"]]}


def _thread(store: durability.stores.Store, thread_id: str) -> None:
    """A durability thread in two namespaces, with writes, a run end and a ledger record."""
    cps = [
        Checkpoint(thread_id=thread_id, checkpoint_id=f"c{i}", state={"i": i}, step=i)
        for i in range(5)
    ]
    cps.insert(2, Checkpoint(thread_id=thread_id, namespace="sub", checkpoint_id="s0"))
    cps.append(
        Checkpoint(
            thread_id=thread_id,
            checkpoint_id="end",
            step_type="run_end",
            status="completed",
            parent_checkpoint_id="c4",
        )
    )
    store.put_many(cps)
    store.put_writes(
        [
            PendingWrite(
                thread_id=thread_id, checkpoint_id="c4", task_id="t", idx=0, channel="x", value=1
            )
        ]
    )
    store.record_run_start(thread_id, run_id="r1", owner="billing")
    store.mark_finished(thread_id)


def _same(a: durability.stores.Store, b: durability.stores.Store, ta: str, tb: str) -> None:
    ha, hb = a.history(ta), b.history(tb)
    strip = {"thread_id", "seq", "size_bytes"}
    assert [{k: v for k, v in vars_of(c).items() if k not in strip} for c in ha] == [
        {k: v for k, v in vars_of(c).items() if k not in strip} for c in hb
    ]
    assert (
        a.history(ta, namespace="sub")[0].checkpoint_id
        == b.history(tb, namespace="sub")[0].checkpoint_id
    )
    assert [w.value for w in a.writes(ta, "c4")] == [w.value for w in b.writes(tb, "c4")]
    ra, rb = a.thread(ta), b.thread(tb)
    assert ra is not None
    assert rb is not None
    assert (ra.owner, ra.started_at, ra.finished_at, ra.due_at) == (
        rb.owner,
        rb.started_at,
        rb.finished_at,
        rb.due_at,
    )


def vars_of(cp: Checkpoint) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(cp)


def test_a_thread_held_under_its_id_is_refused_unless_renamed(tmp_path: Path) -> None:
    """Other checkpoints under the id: refused naming rename=, nothing written; renamed: copied."""
    with (
        durability.open(f"sqlite:///{tmp_path / 'a.db'}") as src,
        durability.open(f"sqlite:///{tmp_path / 'b.db'}") as dst,
    ):
        _thread(src, "order")
        _thread(src, "other")
        dst.put(Checkpoint(thread_id="order", checkpoint_id="mine"))
        with pytest.raises(CopyRefused, match=r"'order'.*rename="):
            durability.copy(src, dst)
        assert dst.thread("other") is None
        assert [c.checkpoint_id for c in dst.history("order")] == ["mine"]
        result = durability.copy(src, dst, rename="{thread_id}-copy")
        assert sorted(result.copied) == ["order", "other"]
        _same(src, dst, "order", "order-copy")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A fresh Postgres schema for a durability store (dropped afterwards)."""
    from conftest import make_target

    for target in make_target("postgres", tmp_path):
        yield target.url


def test_a_copy_killed_midway_finishes_when_run_again(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite → Postgres, killed after the first chunk: the rerun resumes, and the copy ends identical."""
    with (
        durability.open(f"sqlite:///{tmp_path / 'a.db'}") as src,
        durability.open(pg_url) as dst,
    ):
        _thread(src, "order")
        import durability.transfer as transfer

        real = transfer._bulk_load  # Postgres loads each chunk with COPY
        calls = {"n": 0}

        def dies(store: Any, checkpoints: Any, writes: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 2:  # killed before the second chunk's transaction
                raise KeyboardInterrupt("killed")
            real(store, checkpoints, writes)

        monkeypatch.setattr(transfer, "_bulk_load", dies)
        with pytest.raises(KeyboardInterrupt):
            durability.copy(src, dst, chunk_size=3)
        monkeypatch.setattr(transfer, "_bulk_load", real)
        (row,) = plan_copy(src, dst).rows
        assert (row.action, row.present) == ("resume", 3)
        durability.copy(src, dst, chunk_size=3)
        _same(src, dst, "order", "order")
        assert plan_copy(src, dst).rows[0].action == "skip"


def test_the_cli_shows_the_plan_and_copies(lg_file: Path, tmp_path: Path) -> None:
    """--dry-run prints the plan and writes nothing; --yes --json copies and reports."""
    src = f"langgraph+sqlite:///{lg_file}"
    dst = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    dry = runner.invoke(cli, ["copy", src, dst, "--thread", "done", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert plan["counts"]["copy"] == 1
    assert [r["thread_id"] for r in plan["rows"]] == ["done"]
    with durability.open(dst) as store:
        assert store.thread("done") is None
    done = runner.invoke(cli, ["copy", src, dst, "--thread", "done", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["totals"]["checkpoints"] == plan["checkpoints"]


def test_the_bulk_copy_into_postgres_keeps_the_insert_refusals(tmp_path: Path, pg_url: str) -> None:
    """COPY batches several threads per transaction; an erased thread in the batch refuses it
    whole (nothing of the batch written), a duplicate id refuses as a conflict."""
    from durability.errors import CheckpointConflict, ThreadErased
    from durability.stores.rows import Select

    with (
        durability.open(f"sqlite:///{tmp_path / 'a.db'}") as src,
        durability.open(pg_url) as dst,
    ):
        assert dst.bulk is not None
        _thread(src, "a-order")
        _thread(src, "b-order")
        dst.put(Checkpoint(thread_id="b-order", checkpoint_id="gone"))
        dst.erase("b-order")
        with pytest.raises(ThreadErased):
            durability.copy(src, dst, chunk_size=100)
        assert dst.thread("a-order") is None
        durability.copy(src, dst, threads=["a-order"], chunk_size=100)
        _same(src, dst, "a-order", "a-order")
        rows = src._select(Select("a-order", None))
        with pytest.raises(CheckpointConflict, match="nothing was written"):
            dst.bulk.load(rows[:1], [])


def test_the_bulk_copy_into_postgres_re_seals(tmp_path: Path, pg_url: str) -> None:
    """Through COPY too: a renamed copy re-seals state and writes for the new thread id, and a
    clear store copied into one that encrypts is sealed."""
    import os

    from durability.crypto import Keyring, is_sealed
    from durability.stores.rows import Select

    ring = Keyring({"k1": os.urandom(32)})
    with (
        durability.open(f"sqlite:///{tmp_path / 'sealed.db'}", keyring=ring) as sealed,
        durability.open(f"sqlite:///{tmp_path / 'clear.db'}") as clear,
        durability.open(pg_url, keyring=ring) as dst,
    ):
        _thread(sealed, "order")
        _thread(clear, "plain")
        durability.copy(sealed, dst, rename="{thread_id}-copy", chunk_size=4)
        durability.copy(clear, dst, chunk_size=4)
        _same(sealed, dst, "order", "order-copy")
        _same(clear, dst, "plain", "plain")
        for thread in ("order-copy", "plain"):
            assert all(is_sealed(r.state) for r in dst._select(Select(thread, None)))
