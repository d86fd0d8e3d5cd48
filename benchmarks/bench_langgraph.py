"""Benchmark DurabilitySaver against LangGraph's own SqliteSaver and PostgresSaver, side by side.

Run with ``.venv/bin/python benchmarks/bench_langgraph.py [--runs 3] [--pg-dsn DSN]``
(default DSN: ``postgresql://postgres@127.0.0.1:5432/test``; a throw-away schema is created and
dropped). The workload follows LangGraph's own benchmark shape: v4 checkpoints built the way a graph
run builds them (uuid6 ids, the saver's own ``get_next_version``, ``versions_seen``, the parent
id from the previous put), round-robin over 50 threads, a chat-like ~2 KB state in which every
channel changes every step. Only the saver call is timed; every run starts from an empty store.

Operations: (a) put, (b) get_tuple of each thread's latest checkpoint, (c) list of one whole
thread (20 checkpoints, consumed fully). Targets, durability / LangGraph: put >= 1x;
get_tuple and list >= 0.5x. Medians of ``--runs`` runs go into the ``## LangGraph saver``
section of benchmarks/RESULTS.md, with a profile summary for any missed target.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from langgraph.checkpoint.base import BaseCheckpointSaver

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _langgraph import Previous, put_args
from _results import top_functions

import durability
from durability.langgraph import DurabilitySaver

HEADING = "## LangGraph saver"
THREADS = 50
STEPS = 20  # checkpoints per thread: THREADS * STEPS puts per run
PASSES = 10  # get_tuple passes over the threads per run (list: half as many)
TARGETS = {"put": 1.0, "get_tuple": 0.5, "list": 0.5}


def state(step: int) -> dict[str, Any]:
    """A chat-like ~2 KB state; every channel's value depends on the step."""
    return {
        "messages": [
            {
                "role": "user" if i % 2 else "assistant",
                "content": f"message {i} at step {step} " + "lorem ipsum " * 8,
            }
            for i in range(8)
        ],
        "context": {"user": "u-42", "locale": "en", "step": step, "tags": ["refund", "priority"]},
        "status": f"running-{step}",
        "counter": step,
    }


def workload(saver: BaseCheckpointSaver[Any]) -> list[tuple[Any, ...]]:
    """Every put's arguments, built ahead of timing, parents chained per thread."""
    calls: list[tuple[Any, ...]] = []
    previous: dict[str, Previous] = {}
    for step in range(STEPS):
        for t in range(THREADS):
            thread = f"bench-{t}"
            args, previous[thread] = put_args(
                saver, thread, previous.get(thread, (None, {})), state(step), step
            )
            calls.append(args)
    return calls


def timed(fn: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def run_once(saver: BaseCheckpointSaver[Any]) -> dict[str, float]:
    """ops/s of put, get_tuple and list on one fresh saver."""
    calls = workload(saver)
    put = timed(lambda: [saver.put(*c) for c in calls], len(calls))
    latest = [
        {"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}} for t in range(THREADS)
    ]
    # Several passes over every thread, so each timing spans tens of milliseconds.
    get = timed(
        lambda: [saver.get_tuple(c) for _ in range(PASSES) for c in latest], PASSES * THREADS
    )
    listed = timed(
        lambda: [list(saver.list(c)) for _ in range(PASSES // 2) for c in latest],
        PASSES // 2 * THREADS * STEPS,
    )
    return {"put": put, "get_tuple": get, "list": listed}


@contextmanager
def sqlite_savers(kind: str) -> Iterator[BaseCheckpointSaver[Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        if kind == "langgraph":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(path, check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
            conn.close()
        else:
            synchronous = "FULL" if kind == "durability-full" else "NORMAL"
            with durability.open(f"sqlite:///{path}", synchronous=synchronous) as store:
                yield DurabilitySaver(store)


@contextmanager
def postgres_savers(kind: str, dsn: str) -> Iterator[BaseCheckpointSaver[Any]]:
    schema = f"lgbench_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        if kind == "langgraph":
            from langgraph.checkpoint.postgres import PostgresSaver

            sep = "&" if "?" in dsn else "?"
            with PostgresSaver.from_conn_string(
                f"{dsn}{sep}options=-csearch_path%3D{schema}"
            ) as saver:
                saver.setup()
                yield saver
        else:
            with durability.open(dsn, schema=schema) as store:
                yield DurabilitySaver(store)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        engine.dispose()


def measure(
    ours_make: Callable[[], Any], theirs_make: Callable[[], Any], runs: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Medians of ``runs`` runs of each saver, alternating, so both see the same machine."""
    ours, theirs = [], []
    for _ in range(runs):
        for make, results in ((ours_make, ours), (theirs_make, theirs)):
            with make() as saver:
                results.append(run_once(saver))

    def medians(results: list[dict[str, float]]) -> dict[str, float]:
        return {op: statistics.median(r[op] for r in results) for op in TARGETS}

    return medians(ours), medians(theirs)


def profile(make: Callable[[], Any], op: str) -> str:
    """The top cumulative entries of one run's ``op``."""
    with make() as saver:
        calls = workload(saver)
        latest = [
            {"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}}
            for t in range(THREADS)
        ]
        work = {
            "put": lambda: [saver.put(*c) for c in calls],
            "get_tuple": lambda: None,
            "list": lambda: None,
        }
        if op != "put":
            work["put"]()
            work = {
                "get_tuple": lambda: [saver.get_tuple(c) for c in latest],
                "list": lambda: [list(saver.list(c)) for c in latest],
            }
        prof = cProfile.Profile()
        prof.runcall(work[op])
    return top_functions(prof, 8)


#: Why a target is missed, per (database, operation), from the profiles below and the Stores section.
WHY = {
    ("SQLite", "put"): (
        "At `synchronous=FULL` both savers wait for one fsync of the WAL per put, and a durability "
        "put writes more WAL (27.6 KB against 17.9 KB): its row is indexed by thread order with the "
        "sweep's totals and by the unique (thread, namespace, id) index, and the outbox trigger adds "
        "a row of its own (see the issue 15 section, which measures the fsync's CPU cost too). At "
        "durability's default (`NORMAL`, which survives a process kill) the put is 1.5-2x SqliteSaver's."
    ),
    ("SQLite", "get_tuple"): (
        "One statement reads the saver's columns and the pending writes (a `json_group_array` "
        "column, decision 0062); only the state and metadata are decoded, by orjson, then mapped "
        "to LangGraph's dicts, where SqliteSaver unpacks one msgpack blob in C. The statement and "
        "the two JSON decodes are about a quarter of the call; the rest is Python spread thin "
        "(see the issue 15 section). A read does not depend on `synchronous`."
    ),
    ("SQLite", "list"): (
        "Two statements per thread (its checkpoints newest first, then the pending writes of all "
        "of them in one `IN` list), then the model built and mapped back per checkpoint (the same "
        "decode as `get_tuple`), against SqliteSaver's msgpack blob unpacked in C. A saver-only "
        "decode that skips the model (state and metadata straight into LangGraph's tuple) would "
        "close the rest."
    ),
    ("Postgres", "put"): (
        "Both savers send their statements in one round trip and wait for one commit, which is "
        "most of the call (psycopg's `wait`); the difference is client CPU: the LangGraph "
        "checkpoint mapped onto the model and six fields encoded by the codec (~100 µs a put) "
        "where PostgresSaver packs msgpack blobs in C. The ratio swings between runs of this "
        "shared machine (1.37x on 2026-12-02). Tried: keeping the ~4 KB row uncompressed in the "
        "heap (`toast_tuple_target = 8160`) saved Postgres's pglz pass, 6-15 % of a put, but "
        "made the table 3.3x larger; not taken."
    ),
    ("Postgres", "get_tuple"): (
        "One round trip (the checkpoint's saver columns and a `json_agg` of its pending writes, "
        "decision 0062), as PostgresSaver's; the rest is the state and metadata decoded by orjson "
        "and the mapping to LangGraph's dicts."
    ),
    ("Postgres", "list"): (
        "Two round trips per thread (its checkpoints, then their pending writes in one `IN` "
        "list), then the same decode as on SQLite."
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave RESULTS.md alone"
    )
    args = parser.parse_args()
    pairs = {
        "SQLite (durability synchronous=NORMAL, its default)": (
            lambda: sqlite_savers("durability"),
            lambda: sqlite_savers("langgraph"),
        ),
        "SQLite (durability synchronous=FULL, as SqliteSaver)": (
            lambda: sqlite_savers("durability-full"),
            lambda: sqlite_savers("langgraph"),
        ),
        "Postgres": (
            lambda: postgres_savers("durability", args.pg_dsn),
            lambda: postgres_savers("langgraph", args.pg_dsn),
        ),
    }
    rows, missed = [], []
    for backend, (ours_make, theirs_make) in pairs.items():
        ours, theirs = measure(ours_make, theirs_make, args.runs)
        for op, target in TARGETS.items():
            ratio = ours[op] / theirs[op]
            rows.append(
                f"| {backend} | {op} | {ours[op]:,.0f} | {theirs[op]:,.0f} | {ratio:.2f}x | >= {target}x | {'met' if ratio >= target else '**missed**'} |"
            )
            print(f"{backend} {op}: {ratio:.2f}x", file=sys.stderr)
            if ratio < target:
                missed.append((backend, op, ours_make))
    section = [
        HEADING,
        "",
        f"`python benchmarks/bench_langgraph.py --runs {args.runs}` — {platform.python_version()}, langgraph-checkpoint {version('langgraph-checkpoint')}, "
        f"-sqlite {version('langgraph-checkpoint-sqlite')}, -postgres {version('langgraph-checkpoint-postgres')}, {THREADS} threads x {STEPS} checkpoints, ~2 KB state, "
        f"every channel changes every step; medians of ops/s, the two savers alternating run by run (get_tuple: {PASSES} passes over the threads; list: checkpoints/s, {PASSES // 2} passes consuming every thread whole).",
        "",
        "| backend | operation | DurabilitySaver ops/s | LangGraph saver ops/s | ratio | target | |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
        *rows,
        "",
    ]
    for backend, op, make in missed:
        section += [
            f"**Missed: `{op}` on {backend}.** {WHY[backend.split()[0], op]}",
            "",
            f"Profile of the missed `{op}` on {backend} (top functions by own time):",
            "",
            "```",
            profile(make, op),
            "```",
            "",
        ]
    from _results import publish

    publish(HEADING, "\n".join(section) + "\n", write=not args.no_write)


if __name__ == "__main__":
    main()
