"""Benchmark ``durability doctor`` on a 1,000,000-checkpoint SQLite store (target: ≤ 30 s).

Run with ``python benchmarks/bench_doctor.py [--checkpoints 1000000] [--runs 3]`` (needs the
``bench`` extra; a throw-away file, removed afterwards).

The store: ``--checkpoints / 5`` threads of 5 checkpoints each (a ~400-byte chat state, each
row naming the previous one as parent), one pending write per thread, a run start recorded on
every thread and every second one marked finished, all written through ``put_many`` /
``put_writes`` (the bulk calls). A few breaks are injected so every check does real work: 100
pending writes against absent checkpoints, 100 threads whose chain breaks in the middle, 100
ledger records of threads holding nothing.

Timed, per run: ``diagnose(store)`` (every check that applies to SQLite) on a freshly opened
handle, beside SQLite's own ``PRAGMA quick_check`` on the same file (the peer: what the engine
takes to check its pages, knowing nothing of checkpoints). Medians go into the ``## Doctor``
section of benchmarks/RESULTS.md.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import publish

import durability
from durability import Checkpoint, PendingWrite
from durability.clock import FrozenClock
from durability.doctor import diagnose
from durability.settings import Settings

HEADING = "## Doctor"
TARGET_SECONDS = 30.0
PER_THREAD = 5
BREAKS = 100
WRITTEN_AT = datetime(2026, 1, 1, tzinfo=UTC)
NOW = WRITTEN_AT + timedelta(days=1)
BATCH_THREADS = 400


def state(step: int) -> dict[str, Any]:
    """About 400 bytes of JSON: a growing message list plus primitive channels."""
    messages = [
        {"role": "user", "content": f"message {n}: " + "lorem " * 6} for n in range(step + 1)
    ]
    return {"messages": messages, "step": step}


STATES = [state(step) for step in range(PER_THREAD)]


def build(url: str, threads: int) -> None:
    """Fill the store through the bulk calls, then inject the breaks."""
    with durability.open(url, settings=Settings(), clock=FrozenClock(WRITTEN_AT)) as store:
        for start in range(0, threads, BATCH_THREADS):
            part = [f"thread-{n:07d}" for n in range(start, min(start + BATCH_THREADS, threads))]
            store.put_many(
                [
                    Checkpoint(
                        thread_id=t,
                        checkpoint_id=f"{t}-{step}",
                        parent_checkpoint_id=f"{t}-{step - 1}" if step else None,
                        node_id="agent",
                        step=step,
                        state=STATES[step],
                        created_at=WRITTEN_AT + timedelta(seconds=step),
                    )
                    for t in part
                    for step in range(PER_THREAD)
                ],
                synced=True,
            )
            store.put_writes(
                [
                    PendingWrite(
                        thread_id=t,
                        checkpoint_id=f"{t}-{PER_THREAD - 1}",
                        task_id="task",
                        idx=0,
                        channel="messages",
                        value={"n": 1},
                    )
                    for t in part
                ]
            )
        _ledger(store, threads)
        _breaks(store)


def _ledger(store: Any, threads: int) -> None:
    """A run start on every thread, a finished mark on every second one (bulk SQL: the ledger's
    calls are one statement per thread, and the ledger's size, not its writing, is measured)."""
    import sqlalchemy as sa

    from durability.stores.sql.schema import thread_key
    from durability.stores.sql.schema import threads as table

    at = int(WRITTEN_AT.timestamp() * 1_000_000)
    rows = [
        {
            "tkey": thread_key(t),
            "thread_id": t,
            "owner": "bench",
            "run_id": f"run-{n}",
            "started_at": at,
            "finished_at": at if n % 2 else None,
            "due_at": at + 7 * 86_400_000_000 if n % 2 else None,
        }
        for n, t in ((n, f"thread-{n:07d}") for n in range(threads))
    ]
    with store.db.write("fill the ledger") as conn:
        for start in range(0, len(rows), 10_000):
            conn.execute(sa.insert(table), rows[start : start + 10_000])


def _breaks(store: Any) -> None:
    for n in range(BREAKS):
        store.put_writes(
            [
                PendingWrite(
                    thread_id=f"thread-{n:07d}",
                    checkpoint_id="ghost",
                    task_id="t",
                    idx=0,
                    channel="c",
                )
            ]
        )
        store.put(
            Checkpoint(
                thread_id=f"thread-{n:07d}", checkpoint_id="orphan", parent_checkpoint_id="gone"
            )
        )
        store.record_run_start(f"empty-{n}", run_id="r", owner="bench")


def time_doctor(url: str) -> tuple[float, dict[str, int]]:
    with durability.open(url, settings=Settings()) as store:
        started = time.perf_counter()
        diagnosis = diagnose(store, now=NOW)
        seconds = time.perf_counter() - started
    found: dict[str, int] = {}
    for p in diagnosis.problems:
        found[p.check] = found.get(p.check, 0) + 1
    return seconds, found


def time_quick_check(path: Path) -> float:
    conn = sqlite3.connect(path)
    started = time.perf_counter()
    assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    seconds = time.perf_counter() - started
    conn.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print; leave RESULTS.md alone")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="build the store at this path and keep it; reuse it if it is there (a 1M build "
        "takes minutes)",
    )
    args = parser.parse_args()
    threads = args.checkpoints // PER_THREAD
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp:
        path = args.store or Path(tmp) / "store.db"
        url = f"sqlite:///{path}"
        started = time.perf_counter()
        if not path.exists():
            build(url, threads)
        built = time.perf_counter() - started
        how = f"built in {built:.0f} s" if built > 1 else "reused (built by this script)"
        print(f"{threads * PER_THREAD + BREAKS:,} checkpoints: {how}", flush=True)
        load = os.getloadavg()[0]
        ours, peer, found = [], [], {}
        for run in range(args.runs):
            if run % 2:  # alternate which goes first
                peer.append(time_quick_check(path))
                seconds, found = time_doctor(url)
            else:
                seconds, found = time_doctor(url)
                peer.append(time_quick_check(path))
            ours.append(seconds)
            print(
                f"run {run + 1}: doctor {seconds:.1f} s, quick_check {peer[-1]:.1f} s", flush=True
            )
    expected = {
        "writes_without_checkpoint": BREAKS,
        "missing_parent": BREAKS,
        "ledger_without_thread": BREAKS,
        "finished_past_due": 0,
    }
    assert all(found.get(k, 0) == v for k, v in expected.items()), found
    doctor, quick = statistics.median(ours), statistics.median(peer)
    section = f"""{HEADING}

`python benchmarks/bench_doctor.py --checkpoints {args.checkpoints} --runs {args.runs}`: a SQLite
store of {threads * PER_THREAD + BREAKS:,} checkpoints ({threads:,} threads of {PER_THREAD}, a ~400-byte
state, each naming its parent; one pending write per thread; a run start on every thread, every
second one marked finished), with {BREAKS} of each injected break (writes without their
checkpoint, a chain broken in the middle, a ledger record of an empty thread), built through
the bulk calls ({how}). Timed: `diagnose(store)` (every check that applies to SQLite)
on a fresh handle, beside SQLite's own `PRAGMA quick_check` on the same file; medians of
{args.runs} runs, alternating which goes first; {platform.python_version()}, SQLite
{sqlite3.sqlite_version}, 2-core machine shared with other jobs (1-minute load {load:.1f} at the
start of the runs).

| measure | median (s) | target |
| --- | ---: | --- |
| `durability doctor` (all checks) | {doctor:.1f} | ≤ {TARGET_SECONDS:.0f} s: {"met" if doctor <= TARGET_SECONDS else "MISSED"} |
| `PRAGMA quick_check` (the peer) | {quick:.1f} | |
| doctor / quick_check | {doctor / quick:.2f}× | |

Every injected break was found ({", ".join(f"{k}: {v}" for k, v in sorted(found.items()))}).
"""
    publish(HEADING, section, write=not args.no_write)


if __name__ == "__main__":
    main()
