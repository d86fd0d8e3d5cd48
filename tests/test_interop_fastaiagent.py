"""Interop with the real fastaiagent SDK (1.94.0, from the package index), both ways, over loopback.

The SDK runs in a subprocess (its connection, registries and drain threads are process-global):
it connects to this project's plane with ``fastaiagent.connect``, writes through its own
``SQLiteCheckpointer`` (whose writes kick its own drain), and restores with its own
``restore_from_plane``. Nothing of the SDK is patched. What the SDK sent is restored through
this project's public ``restore_from_plane`` and ``durability restore``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastaiagent  # noqa: F401 - the dev extra installs fastaiagent==1.94.0; a missing SDK fails here
from click.testing import CliRunner
from plane_support import PlaneHandle

import durability
from durability import Checkpoint
from durability.cli import cli
from durability.replication import (
    PlaneClient,
    checkpoint_from_wire,
    connect,
    disconnect,
    is_durability_item,
)
from durability.restore import restore_from_plane
from durability.runs import read_thread
from durability.settings import Settings

SDK_WRITES = textwrap.dedent(
    """
    import json, sqlite3, sys, time
    import fastaiagent as fa
    from fastaiagent.chain.checkpoint import Checkpoint
    from fastaiagent.checkpointers import platform_replica
    from fastaiagent.checkpointers.sqlite import SQLiteCheckpointer

    url, key, db, eid = sys.argv[1:5]
    fa.connect(api_key=key, target=url, export_traces=False)
    store = SQLiteCheckpointer(db_path=db)
    store.setup()
    for i in range(3):
        store.put(Checkpoint(
            chain_name="helper", execution_id=eid, node_id=f"turn:{i}", node_index=i, step_type="llm_call",
            agent_path="agent:helper", state_snapshot={"messages": [{"role": "user", "content": f"q{i} ünï"}], "turn": i},
            iteration_counters={"loop": i},
        ))
    store.put(Checkpoint(
        chain_name="helper", execution_id=eid, node_id="run_end", node_index=3, step_type="run_end",
        agent_path="agent:helper", state_snapshot={"turn": 3, "run_status": "completed"},
    ))
    store.put(Checkpoint(
        chain_name="approvals", execution_id=eid + "-paused", node_id="approve", node_index=1,
        step_type="hitl_pause", status="interrupted", state_snapshot={"order": "A-1"},
        interrupt_reason="needs approval", interrupt_context={"order": "A-1"},
    ))

    def unsynced():
        with sqlite3.connect(db) as c:
            return c.execute("select count(*) from checkpoints where synced = 0").fetchone()[0]

    deadline = time.time() + 20
    while unsynced() and time.time() < deadline:
        time.sleep(0.05)
        platform_replica.drain_all_sync()  # the SDK's own drain (its kicks can strand a last row)
    rows = [cp.model_dump() for cp in store.list(eid, limit=100)]
    fa.disconnect()
    print(json.dumps({"unsynced": unsynced(), "rows": rows}))
    """
)

SDK_RESTORES = textwrap.dedent(
    """
    import json, sys
    import fastaiagent as fa
    from fastaiagent.checkpointers.platform_replica import restore_from_plane
    from fastaiagent.checkpointers.sqlite import SQLiteCheckpointer

    url, key, db = sys.argv[1:4]
    fa.connect(api_key=key, target=url, export_traces=False)
    fresh = SQLiteCheckpointer(db_path=db)
    fresh.setup()
    out = {}
    for eid in sys.argv[4:]:
        cp = restore_from_plane(fresh, eid)
        out[eid] = None if cp is None else cp.model_dump()
    out["pending"] = [p.model_dump() for p in fresh.list_pending_interrupts()]
    fa.disconnect()
    print(json.dumps(out))
    """
)


def run_sdk(script: str, args: list[str], cwd: Path) -> Any:
    """Run an SDK script in a subprocess (cwd: its .fastaiagent/ lands there) and parse its JSON output."""
    env = {
        **os.environ,
        "FASTAIAGENT_LOCAL_DB": str(cwd / "local.db"),
        "FASTAIAGENT_RESTORE_FROM_PLANE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sdk_drains_into_our_plane_and_we_restore_what_it_sent(
    plane: PlaneHandle, tmp_path: Path
) -> None:
    """The SDK connects and replicates through its own drain; our client maps its rows back
    exactly, and our restore (``restore_from_plane``, ``durability restore``) writes them into our
    stores as already-synced rows of the restoring project, re-parking its paused run."""
    sent = run_sdk(
        SDK_WRITES, [plane.url, plane.key, str(tmp_path / "sdk.db"), "sdk-exec"], tmp_path
    )
    assert sent["unsynced"] == 0, "the SDK's drain did not get every row into our plane"
    with PlaneClient(plane.url, plane.key) as client:
        pages = client.iter_history("sdk-exec")
        assert pages is not None
        items = list(pages)
        runs = client.runs()
    assert [i["node_id"] for i in items] == ["turn:0", "turn:1", "turn:2", "run_end"]
    assert all(not is_durability_item(i) and i["resource_type"] == "agent" for i in items)
    by_id = {row["checkpoint_id"]: row for row in sent["rows"]}
    for item in items:
        mine = checkpoint_from_wire(item)
        theirs = by_id[mine.checkpoint_id]
        assert (mine.thread_id, mine.runner, mine.node_id, mine.step) == (
            theirs["execution_id"],
            theirs["chain_name"],
            theirs["node_id"],
            theirs["node_index"],
        )
        assert (mine.step_type, mine.status, mine.agent_path) == (
            theirs["step_type"],
            theirs["status"],
            theirs["agent_path"],
        )
        assert mine.state == theirs["state_snapshot"]
        assert mine.iteration_counters == theirs["iteration_counters"]
        assert mine.created_at == datetime.fromisoformat(theirs["created_at"])
    assert [r["health"] for r in runs["items"] if r["execution_id"] == "sdk-exec"] == ["completed"]
    with durability.open(f"sqlite:///{tmp_path / 'ours.db'}", settings=Settings()) as ours:
        with connect(ours, plane.url, plane.key, project_id="shop", background=False) as conn:
            latest = restore_from_plane(ours, "sdk-exec", conn)
        assert latest is not None
        assert latest.is_run_end
        restored = read_thread(ours, "sdk-exec")
        assert [c.checkpoint_id for c in restored] == [i["checkpoint_id"] for i in items]
        for mine in restored:
            theirs = by_id[mine.checkpoint_id]
            assert (mine.runner, mine.node_id, mine.step, mine.step_type, mine.agent_path) == (
                theirs["chain_name"],
                theirs["node_id"],
                theirs["node_index"],
                theirs["step_type"],
                theirs["agent_path"],
            )
            assert mine.state == theirs["state_snapshot"]
            assert mine.created_at == datetime.fromisoformat(theirs["created_at"])
            assert mine.project_id == "shop"
        assert {e.state for e in ours.outbox()} == {"synced"}
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    done = CliRunner().invoke(
        cli,
        ["restore", url, "sdk-exec-paused", "--plane", plane.url, "--single-worker", "--json"],
        env={"DURABILITY_PLANE_API_KEY": plane.key},
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["restored"]["park"]["deadline_source"] == "horizon"
    with durability.open(url, settings=Settings(), single_worker=True) as ours:
        park = ours.get_park("sdk-exec-paused")
        assert park is not None
        assert (park.runner, park.node_id, park.reason, park.context) == (
            "approvals",
            "approve",
            "needs approval",
            {"order": "A-1"},
        )
        assert {e.state for e in ours.outbox()} == {"synced"}


def test_sdk_restores_what_we_sent(plane: PlaneHandle, tmp_path: Path) -> None:
    """Our drain's items are ones the SDK's restore_from_plane reads unchanged (and re-parks interrupts)."""
    when = datetime(2026, 1, 5, 9, 30, 0, 123456, tzinfo=UTC)
    with durability.open(f"sqlite:///{tmp_path / 'ours.db'}", settings=Settings()) as ours:
        ours.put(
            Checkpoint(
                thread_id="ours-chain",
                checkpoint_id="c-1",
                runner="etl",
                node_id="transform",
                step=2,
                step_type="node",
                state={"rows": [1, 2, 3], "note": "naïve"},
                node_input={"batch": 7},
                node_output={"output": "ok"},
                iteration_counters={"retry": 1},
                created_at=when,
                run_id="r-1",
                namespace="sub",
            )
        )
        ours.put(
            Checkpoint(
                thread_id="ours-agent",
                checkpoint_id="c-2",
                runner="helper",
                agent_path="agent:helper/tool:approve",
                node_id="turn:1/tool:approve",
                step=1,
                step_type="hitl_pause",
                status="interrupted",
                state={"messages": [], "turn": 1},
                interrupt_reason="needs approval",
                interrupt_context={"amount": 12},
                created_at=when,
            )
        )
        connect(ours, plane.url, plane.key)
        assert disconnect(ours, timeout=10)
        assert [e.state for e in ours.outbox()] == ["synced", "synced"]
    restored = run_sdk(
        SDK_RESTORES,
        [plane.url, plane.key, str(tmp_path / "fresh.db"), "ours-chain", "ours-agent"],
        tmp_path,
    )
    chain = restored["ours-chain"]
    assert (chain["chain_name"], chain["node_id"], chain["node_index"], chain["status"]) == (
        "etl",
        "transform",
        2,
        "completed",
    )
    assert chain["state_snapshot"] == {"rows": [1, 2, 3], "note": "naïve"}
    assert (chain["node_input"], chain["node_output"], chain["iteration_counters"]) == (
        {"batch": 7},
        {"output": "ok"},
        {"retry": 1},
    )
    assert chain["checkpoint_id"] == "c-1"
    assert chain["created_at"] == when.isoformat()
    agent = restored["ours-agent"]
    assert (agent["status"], agent["interrupt_reason"], agent["interrupt_context"]) == (
        "interrupted",
        "needs approval",
        {"amount": 12},
    )
    assert agent["agent_path"] == "agent:helper/tool:approve"
    assert agent["chain_name"] == "helper"
    assert [(p["execution_id"], p["reason"]) for p in restored["pending"]] == [
        ("ours-agent", "needs approval")
    ]
