"""Benchmark the checkpoint sweep beside LangGraph's per-thread ``delete_thread``, on the same data.

Run with ``python benchmarks/bench_sweep.py [--threads 100000] [--backends sqlite,postgres]
[--runs 3] [--peer-threads N]`` (needs the ``bench`` extra; Postgres on loopback, see
``--pg-url``; every run uses throw-away files and schemas and removes them).

The data: ``--threads`` threads of 5 checkpoints each (a chat-like state of about 400 bytes
whose ``messages`` channel grows every step) and one pending write on the newest checkpoint,
all written 40 days before the sweep's ``now``, so every thread is due on the waiting horizon
(30 days). durability's stores are filled through ``put_many``/``put_writes``; LangGraph's
SqliteSaver and PostgresSaver are filled by bulk SQL in their own format (their serializer,
their tables, their blob rows for non-primitive channels), so both hold the same threads.
Each kind of store is built once and copied for every run (a file copy for SQLite, a
server-side ``INSERT … SELECT`` into a fresh schema for Postgres): a sweep is destructive.

Timed, per run and on a fresh copy: ``plan_sweep`` over every thread, then ``sweep`` (which
deletes every thread), and the peer's ``delete_thread`` called once per thread on every
thread (or, with ``--peer-threads N``, on N threads spread over the same full store, for a
quicker run: each call still pays the full store's index depth). Runs
alternate which subject goes first, so drift on the shared machine hits both alike. Medians go
into the ``## Sweep`` section of benchmarks/RESULTS.md, with a profile for every missed target.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import publish, top_functions

import durability
from durability import Checkpoint, PendingWrite
from durability.settings import Settings

HEADING = "## Sweep"
CHECKPOINTS = 5
WRITTEN_AT = datetime(2026, 1, 1, tzinfo=UTC)
NOW = WRITTEN_AT + timedelta(days=40)
SWEEP_RATIO = 10.0
PLAN_SECONDS = 2.0
BATCH = 2_000


def chat_state(step: int) -> dict[str, Any]:
    """About 400 bytes of JSON: a growing message list plus primitive channels."""
    messages = [
        {"role": "user" if n % 2 else "assistant", "content": f"message {n}: " + "lorem " * 6}
        for n in range(step + 1)
    ]
    return {"messages": messages, "step": step, "status": f"running-{step}"}


STATES = [chat_state(step) for step in range(CHECKPOINTS)]


def thread_ids(count: int) -> list[str]:
    return [f"thread-{n:07d}" for n in range(count)]


# ---------------------------------------------------------------------------- building


def fill_ours(store: durability.stores.Store, threads: list[str]) -> None:
    """Every thread's checkpoints and its pending write, through the store's bulk calls."""
    for start in range(0, len(threads), BATCH // CHECKPOINTS):
        part = threads[start : start + BATCH // CHECKPOINTS]
        store.put_many(
            [
                Checkpoint(
                    thread_id=t,
                    checkpoint_id=f"{t}-cp-{step}",
                    node_id="agent",
                    step=step,
                    state=STATES[step],
                    created_at=WRITTEN_AT + timedelta(seconds=step),
                )
                for t in part
                for step in range(CHECKPOINTS)
            ]
        )
        store.put_writes(
            [
                PendingWrite(
                    thread_id=t,
                    checkpoint_id=f"{t}-cp-{CHECKPOINTS - 1}",
                    task_id="task",
                    idx=0,
                    channel="messages",
                    value={"n": 1},
                )
                for t in part
            ]
        )


def langgraph_checkpoints(saver: Any, thread: str) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The thread's checkpoints as a graph run builds them (v4, uuid6 ids, the saver's versions)."""
    from langgraph.checkpoint.base.id import uuid6

    parent: str | None = None
    versions: dict[str, Any] = {}
    for step, values in enumerate(STATES):
        versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in values}
        checkpoint = {
            "v": 4,
            "id": str(uuid6(clock_seq=step)),
            "ts": (WRITTEN_AT + timedelta(seconds=step)).isoformat(),
            "channel_values": values,
            "channel_versions": dict(versions),
            "versions_seen": {"agent": dict(versions)},
            "updated_channels": sorted(values),
        }
        yield checkpoint, parent
        parent = checkpoint["id"]


def fill_sqlite_saver(conn: sqlite3.Connection, saver: Any, threads: list[str]) -> None:
    """SqliteSaver's rows, as its ``put``/``put_writes`` write them, in one transaction."""
    rows, writes = [], []
    for t in threads:
        for step, (checkpoint, parent) in enumerate(langgraph_checkpoints(saver, t)):
            kind, blob = saver.serde.dumps_typed(checkpoint)
            meta = json.dumps({"source": "loop", "step": step, "parents": {}}).encode()
            rows.append((t, "", checkpoint["id"], parent, kind, blob, meta))
        wkind, wblob = saver.serde.dumps_typed({"n": 1})
        writes.append((t, "", checkpoint["id"], "task", "", 0, "messages", wkind, wblob))
    with conn:
        conn.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
            "idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            writes,
        )


def fill_postgres_saver(saver: Any, threads: list[str]) -> None:
    """PostgresSaver's rows (inline primitives, a blob row per non-primitive channel version)."""
    with saver._cursor() as cur:
        with cur.copy(
            "COPY checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
            "checkpoint, metadata) FROM STDIN"
        ) as copy:
            blobs: list[tuple[Any, ...]] = []
            last: dict[str, str] = {}
            for t in threads:
                for step, (checkpoint, parent) in enumerate(langgraph_checkpoints(saver, t)):
                    inline = dict(checkpoint)
                    values = dict(checkpoint["channel_values"])
                    blob_values = {
                        k: values.pop(k)
                        for k in list(values)
                        if not (values[k] is None or isinstance(values[k], str | int | float))
                    }
                    inline["channel_values"] = values
                    meta = {"source": "loop", "step": step, "parents": {}}
                    copy.write_row(
                        (t, "", checkpoint["id"], parent, json.dumps(inline), json.dumps(meta))
                    )
                    changed = {k: checkpoint["channel_versions"][k] for k in blob_values}
                    blobs += saver._dump_blobs(t, "", blob_values, changed)
                    last[t] = checkpoint["id"]
        with cur.copy(
            "COPY checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
            "FROM STDIN"
        ) as copy:
            for row in blobs:
                copy.write_row(row)
        wkind, wblob = saver.serde.dumps_typed({"n": 1})
        with cur.copy(
            "COPY checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "task_path, idx, channel, type, blob) FROM STDIN"
        ) as copy:
            for t in threads:
                copy.write_row((t, "", last[t], "task", "", 0, "messages", wkind, wblob))


# ---------------------------------------------------------------------------- copies per run


def _pg_admin(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def clone_schema(admin: Any, source: str, target: str) -> None:
    """Copy every row of ``source``'s tables into ``target``'s empty ones, then move the sequences."""
    with admin.begin() as conn:
        tables = [
            r[0]
            for r in conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %(s)s",
                {"s": source},
            )
        ]
        for table in tables:
            if conn.exec_driver_sql(f'SELECT 1 FROM "{target}"."{table}" LIMIT 1').first():
                continue  # filled by setup (format generation, migrations)
            conn.exec_driver_sql(
                f'INSERT INTO "{target}"."{table}" SELECT * FROM "{source}"."{table}"'
            )
        serials = conn.exec_driver_sql(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %(s)s AND column_default LIKE 'nextval%%'",
            {"s": target},
        ).all()
        for table, column in serials:
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('\"{target}\".\"{table}\"', '{column}'), "
                f'COALESCE((SELECT MAX("{column}") FROM "{target}"."{table}"), 0) + 1, false)'
            )


def drop_schema(admin: Any, schema: str) -> None:
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def copy_sqlite(source: Path, target: Path) -> None:
    """A copy of a closed SQLite database (its WAL too, if one is left)."""
    shutil.copyfile(source, target)
    for suffix in ("-wal", "-shm"):
        extra = source.with_name(source.name + suffix)
        if extra.exists():
            shutil.copyfile(extra, target.with_name(target.name + suffix))


@dataclass
class Backend:
    """One backend's built data and how to open a fresh copy of it per run."""

    name: str
    ours: Callable[[], Any]  # context manager -> durability store on a fresh copy
    peer: Callable[[], Any]  # context manager -> LangGraph saver on a fresh copy
    peer_name: str
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def sqlite_backend(
    workdir: Path, threads: list[str], synchronous: str | None = None
) -> tuple[Any, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    ours_template = workdir / "ours.db"
    if not ours_template.exists():
        with durability.open(f"sqlite:///{ours_template}", settings=Settings()) as store:
            fill_ours(store, threads)
    peer_template = workdir / "saver.db"
    if not peer_template.exists():
        conn = sqlite3.connect(peer_template, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        fill_sqlite_saver(conn, saver, threads)
        conn.close()

    @contextmanager
    def ours() -> Iterator[Any]:
        path = workdir / f"ours-{uuid.uuid4().hex[:6]}.db"
        copy_sqlite(ours_template, path)
        try:
            with durability.open(f"sqlite:///{path}", settings=Settings()) as store:
                yield store
        finally:
            for p in workdir.glob(path.name + "*"):
                p.unlink()

    @contextmanager
    def peer() -> Iterator[Any]:
        path = workdir / f"saver-{uuid.uuid4().hex[:6]}.db"
        copy_sqlite(peer_template, path)
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            if synchronous:
                conn.execute(f"PRAGMA synchronous = {synchronous}")
            yield saver
        finally:
            conn.close()
            for p in workdir.glob(path.name + "*"):
                p.unlink()

    return ours, peer


def postgres_backend(pg_url: str, threads: list[str], cleanup: list[Callable[[], None]]) -> Any:
    from langgraph.checkpoint.postgres import PostgresSaver

    admin = _pg_admin(pg_url)
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    tag = uuid.uuid4().hex[:8]
    ours_template, peer_template = f"bench_sweep_{tag}", f"lgbench_sweep_{tag}"
    cleanup += [
        lambda: drop_schema(admin, ours_template),
        lambda: drop_schema(admin, peer_template),
    ]
    with durability.open(pg_url, schema=ours_template, settings=Settings()) as store:
        fill_ours(store, threads)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{peer_template}"')

    def saver_on(schema: str) -> Any:
        return PostgresSaver.from_conn_string(f"{dsn}?options=-csearch_path%3D{schema}")

    with saver_on(peer_template) as saver:
        saver.setup()
        fill_postgres_saver(saver, threads)

    @contextmanager
    def ours() -> Iterator[Any]:
        schema = f"bench_sweep_run_{uuid.uuid4().hex[:8]}"
        try:
            with durability.open(pg_url, schema=schema, settings=Settings()) as store:
                store.ready()
                clone_schema(admin, ours_template, schema)
                _analyze(admin, schema)
                yield store
        finally:
            drop_schema(admin, schema)

    @contextmanager
    def peer() -> Iterator[Any]:
        schema = f"lgbench_sweep_run_{uuid.uuid4().hex[:8]}"
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            with saver_on(schema) as saver:
                saver.setup()
                clone_schema(admin, peer_template, schema)
                _analyze(admin, schema)
                yield saver
        finally:
            drop_schema(admin, schema)

    return ours, peer


def _analyze(admin: Any, schema: str) -> None:
    """Fresh planner statistics on the copy, as autovacuum would give a store this size."""
    with admin.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        for (table,) in conn.exec_driver_sql(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %(s)s",
            {"s": schema},
        ):
            conn.exec_driver_sql(f'ANALYZE "{schema}"."{table}"')


# ---------------------------------------------------------------------------- timing


@dataclass
class RunFigures:
    plan_s: float
    sweep_s: float
    peer_s: float
    peer_threads: int


def time_ours(store: Any, threads: int) -> tuple[float, float]:
    """Seconds of ``plan_sweep`` then ``sweep`` over the whole store (checked: all deleted)."""
    from durability.sweep import plan_sweep, sweep

    began = time.perf_counter()
    plan = plan_sweep(store, store.settings, NOW)
    plan_s = time.perf_counter() - began
    would = sum(1 for row in plan.rows if row.action == "delete")
    assert would == threads, f"the plan deletes {would} of {threads} threads"
    began = time.perf_counter()
    result = sweep(store, store.settings, NOW)
    sweep_s = time.perf_counter() - began
    assert not list(store.iter_threads()), f"threads left after the sweep: {result}"
    return plan_s, sweep_s


def time_peer(saver: Any, sample: list[str]) -> float:
    """Seconds of ``delete_thread`` called once per sampled thread."""
    began = time.perf_counter()
    for t in sample:
        saver.delete_thread(t)
    spent = time.perf_counter() - began
    assert saver.get_tuple({"configurable": {"thread_id": sample[-1], "checkpoint_ns": ""}}) is None
    return spent


def run_once(ours: Any, peer: Any, threads: int, sample: list[str], peer_first: bool) -> RunFigures:
    figures: dict[str, float] = {}

    def do_ours() -> None:
        with ours() as store:
            figures["plan"], figures["sweep"] = time_ours(store, threads)

    def do_peer() -> None:
        with peer() as saver:
            figures["peer"] = time_peer(saver, sample)

    for step in (do_peer, do_ours) if peer_first else (do_ours, do_peer):
        step()
    return RunFigures(figures["plan"], figures["sweep"], figures["peer"], len(sample))


def profile_ours(ours: Any, what: str) -> str:
    """The top functions by cumulative time while ``what`` (plan or sweep) runs on a fresh copy."""
    from durability.sweep import plan_sweep, sweep

    prof = cProfile.Profile()
    with ours() as store:
        call = plan_sweep if what == "plan" else sweep
        prof.runcall(call, store, store.settings, NOW)
    return top_functions(prof, 12)


# ---------------------------------------------------------------------------- report


@dataclass
class Comparison:
    """durability's sweep beside one peer on one backend, and the figures of every run."""

    backend: str
    peer_name: str
    ours: Callable[[], Any]
    peer: Callable[[], Any]
    runs: list[RunFigures] = field(default_factory=list)

    def sweep_rate(self, threads: int) -> float:
        return threads / statistics.median(r.sweep_s for r in self.runs)

    def peer_rate(self) -> float:
        return statistics.median(r.peer_threads / r.peer_s for r in self.runs)

    def ratio(self, threads: int) -> float:
        return self.sweep_rate(threads) / self.peer_rate()


def _plan_seconds(comparisons: list[Comparison], backend: str) -> float:
    """The median ``plan_sweep`` time over every run on ``backend``."""
    return statistics.median(r.plan_s for c in comparisons if c.backend == backend for r in c.runs)


WHY_SQLITE_NORMAL = (
    "SqliteSaver at `synchronous=NORMAL` commits without an fsync, so each `delete_thread` costs "
    "only its two indexed DELETEs; that line says how far the set-based sweep is from the "
    "cheapest per-thread loop, while the target is against LangGraph's default (FULL)."
)


#: What the profiles of a miss show, measured while building this benchmark (see RESULTS.md).
WHY = {
    ("SQLite", "sweep"): (
        "The deletes are set-based plain driver SQL (4 `DELETE … WHERE tkey IN (…) AND thread_id "
        "IN (…)` per 500 threads, 1,000 threads per transaction, in thread-key order, with a 64 MB "
        "page cache), and most of the time is SQLite's own: `commit` writes the ~4,000 pages a "
        "batch dirties to the WAL (and every few batches the WAL checkpoint copies them into the "
        "database and fsyncs), `execute` runs the B-tree deletes. A thread here is 28 B-tree "
        "deletes (5 checkpoint rows, each in the table, the covering totals index, the by-id "
        "index, the unique key and the outbox index; a pending write in its table, `wkey` and "
        "key indexes), where SqliteSaver's is 12 (table and primary key, twice). Per deleted "
        "thread the sweep writes 35 KB through syscalls where SqliteSaver at FULL writes 61 KB "
        "and fsyncs, about half of its time (its FULL rate is half its NORMAL one). On the "
        "deletes alone (the "
        "first 30,000 threads in key order, sqlite3 module, about 5,900 threads/s as shipped): "
        "`secure_delete` FAST +10 %, OFF +16 %; the outbox index dropped +10 % (a store that "
        "never connected keeps every row in it); `synchronous=OFF` +63 %. With only the table, "
        "the thread-totals index and the writes' `wkey` and `tkey` indexes left, and "
        "`secure_delete` OFF, it ran about 6,500 threads/s (8,900 by CPU time), 4-5x SqliteSaver at FULL: 10x is out of reach of "
        "SQLite's B-tree deletes, WAL writes and checkpoint fsyncs for 6 rows a thread on this "
        "machine, whatever the SQL."
    ),
    ("Postgres", "sweep"): (
        "One statement per 1,000-thread batch deletes from the four tables by (tkey, thread_id) "
        "pairs sent once (the keys as one joined text, the ids as one binary array); the "
        "client's share is small and the server's is `wait`. `EXPLAIN (ANALYZE, BUFFERS, WAL)` "
        "of one batch: 41-64 ms, about 2,000 heap pages dirtied, 6,000 WAL records and "
        "600-1,100 full-page images (5-9 MB of WAL): every deleted row's heap tuple is marked "
        "and logged, about 8 µs a row, 4-6.5 s of server time for the 600,000 rows. The `sweep` "
        "call also plans (the `plan_sweep` row, 1.3-1.8 s of it). 10x PostgresSaver at "
        "1,200-1,350 threads/s is a whole sweep in 7.4-8.3 s, which the server's deletes and "
        "the plan fill on a loaded run: runs land either side of the target."
    ),
    ("SQLite", "plan"): (
        "One GROUP BY over the covering `(tkey, seq, created_at, size_bytes)` index plus the "
        "ledger, then 100,000 `ThreadRecord`s and plan rows built in Python; the median sits "
        "near the target and moves either side of it with the machine's load."
    ),
    ("Postgres", "plan"): (
        "Two statements in one snapshot, a GROUP BY over the covering thread-totals index "
        "(500,000 entries) and the ledger: the server's share is `wait`, the rest is reading "
        "100,000 rows into numpy columns (`_sweep_columns`) and classifying them with array "
        "operations. The copies are ANALYZEd, not VACUUMed, so the index-only scan visits every "
        "heap page (one copy: 2.2-2.5 s, 1.5-1.6 s once VACUUMed, as autovacuum would); the "
        "median crosses the target with the machine's load."
    ),
}


def report(
    args: argparse.Namespace,
    backends: list[str],
    peer_threads: int,
    load: float,
    comparisons: list[Comparison],
    profiles: dict[tuple[str, str], str],
) -> list[str]:
    """The ``## Sweep`` section: the command, the setup, the figures, the targets and profiles."""
    n = args.threads
    lines = [
        HEADING,
        "",
        f"`python benchmarks/bench_sweep.py --threads {n} --peer-threads {peer_threads} "
        f"--backends {','.join(backends)} --runs {args.runs}` — {date.today().isoformat()}, "
        f"Python {platform.python_version()}, durability {durability.__version__}, SQLite "
        f"{sqlite3.sqlite_version}, langgraph-checkpoint {version('langgraph-checkpoint')}, -sqlite "
        f"{version('langgraph-checkpoint-sqlite')}, -postgres {version('langgraph-checkpoint-postgres')}, "
        f"SQLAlchemy {version('sqlalchemy')}, psycopg {version('psycopg')}; {platform.machine()}, "
        f"{os.cpu_count()} cores shared with four other helpers' builds and test runs (load "
        f"average {load:.1f} at the start), so absolute figures are noisy: read the ratios.",
        "",
        f"Data: {n:,} threads × {CHECKPOINTS} checkpoints (about 400 B of state each) and one "
        "pending write per thread, every thread past its waiting horizon. Every run gives each "
        "subject a fresh copy of the same data; durability sweeps all of it in one `sweep` call, "
        f"the peer calls `delete_thread` once per thread on {peer_threads:,} of the threads; the "
        "subjects take turns (runs alternate which goes first), so load on the shared machine "
        f"falls on both. Medians of {args.runs} runs.",
        "",
        "| backend | peer | durability `sweep` threads/s | peer `delete_thread` threads/s | ratio | wanted | |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in comparisons:
        ratio = c.ratio(n)
        lines.append(
            f"| {c.backend} | {c.peer_name} | {c.sweep_rate(n):,.0f} | {c.peer_rate():,.0f} | "
            f"{ratio:.1f}x | >= {SWEEP_RATIO:.0f}x | {'met' if ratio >= SWEEP_RATIO else '**missed**'} |"
        )
    if any("NORMAL" in c.peer_name for c in comparisons):
        lines += ["", WHY_SQLITE_NORMAL]
    lines += [
        "",
        "| backend | `plan_sweep` over the store, seconds | wanted | |",
        "| --- | ---: | ---: | --- |",
    ]
    for backend in dict.fromkeys(c.backend for c in comparisons):
        seconds = _plan_seconds(comparisons, backend)
        ok = seconds <= PLAN_SECONDS
        lines.append(
            f"| {backend} | {seconds:.2f} | <= {PLAN_SECONDS:.0f} | {'met' if ok else '**missed**'} |"
        )
    lines.append("")
    for (backend, what), profile in profiles.items():
        lines += [
            f"**Missed: `{'plan_sweep' if what == 'plan' else 'sweep'}` on {backend}.** "
            + WHY.get((backend, what), ""),
            "",
            "Profile (top functions by own time):",
            "",
            "```",
            profile,
            "```",
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument(
        "--peer-threads", type=int, default=0, help="threads the peer deletes (default: all)"
    )
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--workdir", default=None, help="where SQLite files go (default: a temp dir)"
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave RESULTS.md alone"
    )
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    threads = thread_ids(args.threads)
    peer_threads = min(args.peer_threads or args.threads, args.threads)
    sample = threads[:: max(1, args.threads // peer_threads)][:peer_threads]
    load = os.getloadavg()[0]
    cleanup: list[Callable[[], None]] = []
    comparisons: list[Comparison] = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        try:
            if "sqlite" in backends:
                began = time.perf_counter()
                ours, peer = sqlite_backend(Path(tmp), threads)
                _, peer_normal = sqlite_backend(Path(tmp), threads, synchronous="NORMAL")
                print(f"sqlite built in {time.perf_counter() - began:.0f} s", file=sys.stderr)
                comparisons.append(
                    Comparison("SQLite", "SqliteSaver (FULL, its default)", ours, peer)
                )
                comparisons.append(
                    Comparison("SQLite", "SqliteSaver (NORMAL, as durability)", ours, peer_normal)
                )
            if "postgres" in backends:
                began = time.perf_counter()
                ours, peer = postgres_backend(args.pg_url, threads, cleanup)
                print(f"postgres built in {time.perf_counter() - began:.0f} s", file=sys.stderr)
                comparisons.append(Comparison("Postgres", "PostgresSaver", ours, peer))
            for run in range(args.runs):
                for c in comparisons:
                    c.runs.append(run_once(c.ours, c.peer, args.threads, sample, run % 2 == 1))
                    print(
                        f"{c.backend} vs {c.peer_name}, run {run + 1}: {c.runs[-1]}",
                        file=sys.stderr,
                    )
            profiles = {}
            for c in comparisons:
                missed = [("sweep", c.ratio(args.threads) < SWEEP_RATIO)]
                missed.append(("plan", _plan_seconds(comparisons, c.backend) > PLAN_SECONDS))
                for what, miss in missed:
                    if miss and (c.backend, what) not in profiles:
                        profiles[(c.backend, what)] = profile_ours(c.ours, what)
        finally:
            for fn in cleanup:
                fn()
    lines = report(args, backends, peer_threads, load, comparisons, profiles)
    text = "\n".join(lines) + "\n"
    publish(HEADING, text, write=not args.no_write)


if __name__ == "__main__":
    main()
