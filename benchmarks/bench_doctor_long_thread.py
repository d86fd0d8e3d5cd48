"""Benchmark the doctor's two SQLite anti-joins on one long thread, before and after they used
the rebuilt table's ids index (issue 20).

Run with ``python benchmarks/bench_doctor_long_thread.py [--checkpoints 5000] [--runs 3]``.

The store: one thread of ``--checkpoints`` rows, each naming the previous one as parent, and a
pending write on every second row, in a throw-away SQLite file (migration 15's rebuilt table).
Timed side by side, alternating which goes first: the queries as the doctor first wrote them
(the peer: a write's checkpoint found by ``(tkey, ckey)``, a parent by ``(tkey, namespace,
checkpoint_id)``, neither of which the rebuilt table indexes whole, so each probe walks the
thread's rows) and the doctor's own reads today (``durability.doctor.reads``), which probe the
unique ``(thread_id, namespace, checkpoint_id)`` index once per row. Medians go into the
``## Doctor on one long thread`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from _results import publish

import durability
from durability import Checkpoint, PendingWrite
from durability.doctor import reads
from durability.model import STEP_FORK_ORIGIN
from durability.stores.sql.schema import checkpoints, writes

HEADING = "## Doctor on one long thread"


def build(store: Any, count: int) -> None:
    rows = [
        Checkpoint(
            thread_id="long",
            checkpoint_id=f"c{i:06d}",
            parent_checkpoint_id=f"c{i - 1:06d}" if i else None,
        )
        for i in range(count)
    ]
    for start in range(0, count, 1000):
        store.put_many(rows[start : start + 1000])
    store.put_writes(
        [
            PendingWrite(
                thread_id="long", checkpoint_id=f"c{i:06d}", task_id="t", idx=0, channel="c"
            )
            for i in range(0, count, 2)
        ]
    )


def by_hashes(store: Any) -> dict[str, Callable[[], Any]]:
    """The peer: the anti-joins as first written, by the thread and checkpoint hashes."""
    c, w = checkpoints.c, writes.c
    parent, older = checkpoints.alias("parent"), checkpoints.alias("older")
    orphan_writes = sa.select(w.thread_id).where(
        ~sa.exists().where(c.tkey == w.tkey, c.ckey == w.ckey)
    )
    missing_parents = sa.select(c.thread_id).where(
        c.parent_checkpoint_id.isnot(None),
        c.parent_checkpoint_id != "",
        sa.or_(c.step_type.is_(None), c.step_type != STEP_FORK_ORIGIN),
        ~sa.exists().where(
            parent.c.tkey == c.tkey,
            parent.c.namespace == c.namespace,
            parent.c.checkpoint_id == c.parent_checkpoint_id,
        ),
        sa.exists().where(
            older.c.tkey == c.tkey, older.c.namespace == c.namespace, older.c.seq < c.seq
        ),
    )

    def run(query: Any) -> Callable[[], Any]:
        def call() -> Any:
            with store.db.read("benchmark the peer") as conn:
                return list(conn.execute(query))

        return call

    return {"writes_without_checkpoint": run(orphan_writes), "missing_parent": run(missing_parents)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print; leave RESULTS.md alone")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-doctor-long-") as tmp,
        durability.open(f"sqlite:///{tmp}/store.db") as store,
    ):
        build(store, args.checkpoints)
        peer = by_hashes(store)
        ours = {
            "writes_without_checkpoint": lambda: reads.orphan_writes(store),
            "missing_parent": lambda: reads.missing_parents(store),
        }
        for check in ours:
            times: dict[str, list[float]] = {"peer": [], "ours": []}
            for run in range(args.runs):
                order = ("peer", "ours") if run % 2 == 0 else ("ours", "peer")
                for side in order:
                    call = peer[check] if side == "peer" else ours[check]
                    started = time.perf_counter()
                    call()
                    times[side].append(time.perf_counter() - started)
            before, after = statistics.median(times["peer"]), statistics.median(times["ours"])
            rows.append(f"| `{check}` | {before:.2f} | {after:.3f} | {before / after:,.0f}× |")
    table = "\n".join(rows)
    section = f"""{HEADING}

`python benchmarks/bench_doctor_long_thread.py --checkpoints {args.checkpoints} --runs {args.runs}`:
one SQLite thread of {args.checkpoints:,} checkpoints, each naming the previous one as parent, a
pending write on every second one. The anti-joins as the doctor first wrote them (by the
`tkey`/`ckey` hashes, which the rebuilt table of migration 15 does not index whole, so each
probe walks the thread's rows: quadratic in the thread's length) beside the doctor's reads
today (one probe of the unique `(thread_id, namespace, checkpoint_id)` index per row); medians
of {args.runs} runs, alternating which goes first; Python {platform.python_version()}, SQLite
{sqlite3.sqlite_version}, 2-core machine shared with other jobs (1-minute load {load:.1f} at the start).

| check | by hashes (s) | by ids (s) | ratio |
| --- | ---: | ---: | ---: |
{table}
"""
    publish(HEADING, section, write=not args.no_write)


if __name__ == "__main__":
    main()
