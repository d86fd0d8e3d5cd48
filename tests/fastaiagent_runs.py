"""Run the real fastaiagent SDK (1.94) to make a checkpoint store; print what it wrote, as JSON.

``python fastaiagent_runs.py sqlite PATH`` or ``python fastaiagent_runs.py postgres DSN SCHEMA``;
``... loop N`` (after the target) keeps writing N more executions, for a reader to race;
``... breaks`` writes, through the SDK's own calls, the rows its known bugs leave (for the
doctor): a quarantined run end, idempotency rows of no execution, an unsent NaN, and
``created_at`` texts in two formats that sort against their times.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

from fastaiagent import Chain
from fastaiagent.chain.interrupt import Resume, interrupt
from fastaiagent.tool import FunctionTool


def fetch(order: str) -> dict:
    return {"order": order, "amount": 12.5}


def approve(order: str) -> dict:
    answer = interrupt("needs approval", {"order": order})
    return {"approved": answer.approved}


def boom(order: str) -> dict:
    raise ValueError("payment gateway down")


def chain(name: str, steps: list, store: object) -> Chain:
    c = Chain(name, checkpointer=store)
    for step_id, fn in steps:
        c.add_node(
            step_id,
            tool=FunctionTool(name=step_id, fn=fn),
            input_mapping={"order": "{{state.order}}"},
        )
    for (a, _), (b, _) in itertools.pairwise(steps):
        c.connect(a, b)
    return c


async def breaks(store: Any) -> None:
    """The rows the SDK's known bugs leave, each written through its public calls."""
    from fastaiagent.chain.checkpoint import Checkpoint

    await chain("done", [("fetch", fetch)], store).aexecute(
        {"order": "D-1"}, execution_id="exec-done"
    )
    [run_end] = [cp for cp in store.list("exec-done") if cp.step_type == "run_end"]
    store.mark_quarantined({run_end.checkpoint_id: "HTTP 413: state_snapshot over the cap"})
    store.put_idempotent("exec-gone", "charge_card", {"charged": True})
    if type(store).__name__.startswith("SQLite"):  # Postgres jsonb refuses NaN itself
        store.put(
            Checkpoint(
                execution_id="exec-nan",
                chain_name="scores",
                node_id="score",
                state_snapshot={"score": float("nan")},
            )
        )
    for at in ("2026-12-02T10:00:00Z", "2026-12-02T10:00:00.100000+00:00"):
        store.put(Checkpoint(execution_id="exec-times", chain_name="t", node_id="n", created_at=at))
    print(json.dumps({"run_end": run_end.checkpoint_id}))


async def main(store: object, loop: int) -> None:
    approvals = chain("approvals", [("fetch", fetch), ("approve", approve)], store)
    if loop:
        for n in range(loop):
            await chain("loop", [("fetch", fetch)], store).aexecute(
                {"order": f"L-{n}"}, execution_id=f"exec-loop-{n}"
            )
        return
    await approvals.aexecute({"order": "A-1"}, execution_id="exec-paused")
    await approvals.aexecute({"order": "A-2"}, execution_id="exec-resumed")
    await approvals.resume("exec-resumed", resume_value=Resume(approved=True))
    try:  # noqa: SIM105
        await chain("payments", [("fetch", fetch), ("boom", boom)], store).aexecute(
            {"order": "B-1"}, execution_id="exec-failed"
        )
    except Exception:  # the SDK raises after writing the failed run end  # noqa: S110
        pass
    rows = {eid: store.list(eid) for eid in ("exec-paused", "exec-resumed", "exec-failed")}
    # Outbox states, through the SDK's own outbox API: the first rows reached the plane, one was refused.
    first = rows["exec-resumed"][0].checkpoint_id
    refused = rows["exec-resumed"][1].checkpoint_id
    store.mark_synced([first])
    store.mark_quarantined(
        {
            refused: "HTTP 413 from /checkpoints/ingest: state_snapshot is 1200137 bytes, over the 1048576-byte cap"
        }
    )
    print(
        json.dumps({eid: [cp.model_dump() for cp in cps] for eid, cps in rows.items()}, default=str)
    )


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "sqlite":
        from fastaiagent.checkpointers.sqlite import SQLiteCheckpointer

        store, rest = SQLiteCheckpointer(db_path=sys.argv[2]), sys.argv[3:]
    else:
        from fastaiagent.checkpointers.postgres import PostgresCheckpointer

        store, rest = PostgresCheckpointer(sys.argv[2], schema=sys.argv[3]), sys.argv[4:]
    store.setup()
    if rest and rest[0] == "breaks":
        asyncio.run(breaks(store))
    else:
        asyncio.run(main(store, int(rest[1]) if rest and rest[0] == "loop" else 0))
    store.close()
