"""The notebooks on production-sized stores: wall time and peak kernel memory of each (issue 16).

Run with ``python benchmarks/bench_scale.py --checkpoints 1000000 [--threads N] [--backend
postgres] [--dir DIR] [--no-write]``. It builds a store of that many checkpoints once (five rows
per thread by default: a start, steps and a run end; states of ~1 KB with a tail of 8 KB and
2 MB ones; times spread over 60 days; the ledger filled; all but the newest 1,000 rows
acknowledged by a plane) and reuses it on later runs. The schema comes from the library, the
rows by bulk SQL with the checkpoint indexes and the outbox trigger dropped (Postgres: disabled)
for the load and made after it. SQLite: a file ``scale-N-T.db`` under ``--dir`` (default
``benchmarks/.scratch/``, git-ignored; 10,000,000 rows: 17 GB, about 40 minutes on a loaded
2-core machine). Postgres: a database ``scale_N_T`` created on the server of ``--postgres``
(``COPY`` of the same rows, then ``VACUUM ANALYZE``; a database left by an interrupted build is
dropped and built again). Then it executes each notebook once on the store through
``durability.bundle.execute`` (the store URL in its parameters cell) in a process of its own,
reads the peak resident memory of that process's kernel (``RUSAGE_CHILDREN`` once the kernel
has exited), and prints the slowest cells (from the executed copy's timings). Targets: 60 s
and 2 GB per notebook. Never run by ``.ci/run``; ``--build-only`` builds, ``--only NAME`` runs
one notebook, ``--timeout`` is nbclient's per-cell limit. Unless ``--no-write``, the table is
written into ``benchmarks/RESULTS.md`` as a section of its own per store.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import write_section

import durability
from durability import bundle
from durability.stores.rows import STORED_FIELDS
from durability.stores.sql.schema import checkpoint_key, thread_key

SCRATCH = Path(__file__).resolve().parent / ".scratch"
TARGET_S, TARGET_MB = 60.0, 2048.0
STEPS = ("__start__", "fetch", "draft", "review", "run_end")
END = datetime(2026, 12, 1, tzinfo=UTC)
#: Most states are ~1 KB; one row in 97 is 8 KB and one in 10,007 is 2 MB (the heavy tail).
STATES = {
    size: json.dumps({"topic": "t", "notes": "x" * size}) for size in (1_000, 8_000, 2_000_000)
}


#: The ledger columns the build fills.
THREAD_COLUMNS = "tkey, thread_id, owner, run_id, started_at, finished_at, due_at"
DAY = 86_400 * 10**6
#: The meta row a finished Postgres build writes last (an interrupted one is built again).
BUILT = "bench_scale_built"
#: The rows go to Postgres as ``COPY`` text unescaped: no generated value holds a tab, a newline
#: or a backslash (the ids and the fixed JSON columns are plain ASCII too).
assert not any(c in state for state in STATES.values() for c in "\t\n\\")


def state_of(n: int) -> str:
    """The state of the ``n``-th row: the median, the long tail or the multi-MB outlier."""
    if n % 10_007 == 10_006:
        return STATES[2_000_000]
    return STATES[8_000] if n % 97 == 96 else STATES[1_000]


def build(path: Path, checkpoints: int, threads: int) -> float:
    """Create the store at ``path`` (schema through the library, rows by bulk SQL); seconds.

    The checkpoint indexes and the outbox trigger are dropped for the load and recreated after
    it (a sort per index instead of a random B-tree insert per row), then the outbox and the
    acknowledgements are written by two set statements.
    """
    started = time.perf_counter()
    with durability.open(f"sqlite:///{path}") as store:
        store.record_connection("", "http://plane.invalid")  # it replicates
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-1000000")
    saved = db.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'durability_checkpoints' "
        "AND type IN ('index', 'trigger') AND sql IS NOT NULL"
    ).fetchall()
    for kind, name, _ in saved:
        db.execute(f"DROP {kind.upper()} {name}")
    columns = [*STORED_FIELDS]
    marks = ", ".join("?" * (len(columns) + 2))
    db.executemany(
        f"INSERT INTO durability_checkpoints (tkey, ckey, {', '.join(columns)}) VALUES ({marks})",
        _rows(checkpoints, threads, columns),
    )
    db.executemany(
        f"INSERT INTO durability_threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        _thread_rows(threads),
    )
    print(f"  rows in {time.perf_counter() - started:.0f} s; indexing", flush=True)
    for _, _, sql in saved:
        db.execute(sql)
    newest = db.execute("SELECT MAX(seq) - 1000 FROM durability_checkpoints").fetchone()[0]
    db.execute(
        "INSERT INTO durability_synced (seq, synced_at, attempts) SELECT seq, "
        "created_at + 60000000, 1 FROM durability_checkpoints WHERE seq <= ?",
        (newest,),
    )
    db.execute(
        "INSERT INTO durability_outbox (seq, project_id) SELECT seq, project_id "
        "FROM durability_checkpoints WHERE seq > ?",
        (newest,),
    )
    # Every row has its outbox row or synced record: the outbox mark is the newest (0150).
    db.execute(
        "UPDATE durability_meta SET value = (SELECT CAST(MAX(seq) AS TEXT) "
        "FROM durability_checkpoints) WHERE key = 'outbox_through'"
    )
    db.commit()
    db.close()
    return time.perf_counter() - started


def postgres_store(admin_url: str, checkpoints: int, threads: int) -> tuple[str, str]:
    """The store URL of the Postgres store of this size, and how it came to be (built or reused).

    Its database is ``scale_N_T`` on the server of ``admin_url``; it is reused when its build
    finished (a meta row the build writes last), else dropped and built again.
    """
    import psycopg

    admin = make_url(admin_url)
    name = f"scale_{checkpoints}_{threads}"
    url = admin.set(database=name).render_as_string(hide_password=False)
    server = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(server, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if exists and _postgres_finished(url):
        return url, "reused"
    with psycopg.connect(server, autocommit=True) as conn:
        if exists:
            conn.execute(f'DROP DATABASE "{name}"')  # the name is made here, never given
        conn.execute(f'CREATE DATABASE "{name}"')
    print(f"building database {name} ...", flush=True)
    return url, f"built in {build_postgres(url, checkpoints, threads):.0f} s"


def _postgres_finished(url: str) -> bool:
    """Whether the build of the store at ``url`` wrote its last row."""
    import psycopg

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        try:
            found = conn.execute("SELECT 1 FROM durability_meta WHERE key = %s", (BUILT,))
        except psycopg.errors.UndefinedTable:
            return False
        return found.fetchone() is not None


def build_postgres(url: str, checkpoints: int, threads: int) -> float:
    """Create the Postgres store at ``url`` (schema through the library, rows by ``COPY``); seconds.

    As for SQLite, the checkpoint indexes (all but the primary key) are dropped for the load and
    made after it; the outbox's statement trigger is disabled for the load instead, and the
    outbox and the acknowledgements are written by two set statements. ``VACUUM ANALYZE`` last,
    as autovacuum would leave a store of this age (visibility map and statistics).
    """
    import psycopg

    started = time.perf_counter()
    with durability.open(url) as store:
        store.record_connection("", "http://plane.invalid")  # it replicates
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET synchronous_commit = off")
        saved = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = "
            "'durability_checkpoints' AND indexname NOT LIKE '%_pkey'"
        ).fetchall()
        for name, _ in saved:
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("ALTER TABLE durability_checkpoints DISABLE TRIGGER durability_outbox_put")
        columns = ", ".join(f'"{c}"' for c in ("tkey", "ckey", *STORED_FIELDS))
        _copy(
            conn,
            f"COPY durability_checkpoints ({columns}) FROM STDIN",
            _rows(checkpoints, threads, [*STORED_FIELDS]),
        )
        _copy(conn, f"COPY durability_threads ({THREAD_COLUMNS}) FROM STDIN", _thread_rows(threads))
        print(f"  rows in {time.perf_counter() - started:.0f} s; indexing", flush=True)
        for _, sql in saved:
            conn.execute(sql)
        conn.execute("ALTER TABLE durability_checkpoints ENABLE TRIGGER durability_outbox_put")
        newest = conn.execute("SELECT MAX(seq) - 1000 FROM durability_checkpoints").fetchone()
        conn.execute(
            "INSERT INTO durability_synced (seq, synced_at, attempts) SELECT seq, "
            "created_at + 60000000, 1 FROM durability_checkpoints WHERE seq <= %s",
            newest,
        )
        conn.execute(
            "INSERT INTO durability_outbox (seq, project_id) SELECT seq, project_id "
            "FROM durability_checkpoints WHERE seq > %s",
            newest,
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("INSERT INTO durability_meta (key, value) VALUES (%s, 'yes')", (BUILT,))
    return time.perf_counter() - started


def _copy(conn: Any, sql: str, rows: Iterator[tuple[object, ...]]) -> None:
    """``COPY`` ``rows`` as text, 10,000 lines a write (see the assertion on :data:`STATES`)."""
    with conn.cursor() as cur, cur.copy(sql) as copy:
        lines: list[str] = []
        for row in rows:
            lines.append("\t".join("\\N" if v is None else str(v) for v in row))
            if len(lines) == 10_000:
                copy.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            copy.write("\n".join(lines) + "\n")


def _thread_rows(threads: int) -> Iterator[tuple[object, ...]]:
    """The ledger's record of every thread (:data:`THREAD_COLUMNS`): minted by its run."""
    for t in range(threads):
        at = _start_of(t, threads)
        thread_id = f"thread-{t:08d}"
        yield (thread_key(thread_id), thread_id, "minted", f"run-{t}", at, at + 10**8, at + DAY)


def _start_of(t: int, threads: int) -> int:
    """When thread ``t`` starts: spread over the 60 days before :data:`END`, shuffled."""
    start_us = int((END - timedelta(days=60)).timestamp() * 1e6)
    return start_us + (t * 7919 % threads) * (60 * 86_400 * 10**6 // threads)


def _rows(checkpoints: int, threads: int, columns: list[str]) -> Iterator[tuple[object, ...]]:
    """Every checkpoint row, thread by thread: a start, steps and a run end (one in ten failed)."""
    per_thread = max(1, checkpoints // threads)
    written = 0
    for t in range(threads):
        thread_id = f"thread-{t:08d}"
        tkey = thread_key(thread_id)
        at = _start_of(t, threads)
        count = per_thread if t < threads - 1 else checkpoints - written
        for n in range(count):
            name = STEPS[min(n, len(STEPS) - 2)] if n < count - 1 else "run_end"
            end = name == "run_end"
            state = state_of(written)
            values = {
                "thread_id": thread_id,
                "namespace": "",
                "checkpoint_id": f"c-{n}",
                "run_id": f"run-{t}",
                "parent_checkpoint_id": f"c-{n - 1}" if n else None,
                "runner": "publish",
                "agent_id": None,
                "agent_path": None,
                "node_id": name,
                "step": n,
                "step_type": "run_end" if end else "node",
                "status": ("failed" if t % 10 == 0 else "completed") if end else "completed",
                "iteration": 0,
                "interrupt_reason": None,
                "created_at": at + n * 20_000_000,
                "project_id": "",
                "state": state,
                "node_input": "null",
                "node_output": "null",
                "iteration_counters": "{}",
                "interrupt_context": "null",
                "metadata": "{}",
                "size_bytes": len(state) + 16,
            }
            written += 1
            if written % 1_000_000 == 0:
                print(f"  {written:,} checkpoints", flush=True)
            yield (
                tkey,
                checkpoint_key(thread_id, "", values["checkpoint_id"]),
                *(values[c] for c in columns),
            )


def run_one(name: str, store_url: str, out: Path, timeout: float) -> None:
    """Execute one notebook (in this process); print its seconds, its kernel's peak RSS and its
    slowest cells."""
    params: dict[str, object] = {"store_url": store_url, "output_dir": str(out / "charts")}
    if name == "plan_retention.ipynb":
        params["now"] = END.isoformat()
    if name == "restore_runs.ipynb":
        params["copy_store"] = False  # a rehearsal copy is a file copy of the store's size
    started = time.perf_counter()
    error = None
    try:
        bundle.execute(bundle.notebook(name), params, out / "executed", cwd=out, timeout=timeout)
    except Exception as exc:  # the figure is recorded with the failure, not lost
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    cells = slowest_cells(out / "executed" / name)
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "error": error, "cells": cells}))


def slowest_cells(executed: Path, count: int = 8) -> list[tuple[float, int, str]]:
    """The ``count`` slowest code cells of an executed notebook: seconds (nbclient's timings,
    input to reply), the cell's index and its first line."""
    if not executed.exists():
        return []
    found = []
    for index, cell in enumerate(json.loads(executed.read_text())["cells"]):
        timing = cell.get("metadata", {}).get("execution", {})
        begun, done = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if cell["cell_type"] != "code" or not (begun and done):
            continue
        spent = (datetime.fromisoformat(done) - datetime.fromisoformat(begun)).total_seconds()
        found.append((round(spent, 1), index, "".join(cell["source"]).split("\n")[0][:90]))
    return sorted(found, reverse=True)[:count]


def main() -> None:
    args = _parser().parse_args()
    if args.run_one:
        name, url, out = args.run_one
        run_one(name, url, Path(out), args.timeout)
        return
    threads = args.threads or max(1, args.checkpoints // 5)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.backend == "postgres":
        url, built = postgres_store(args.postgres, args.checkpoints, threads)
        stem, size_mb = make_url(url).database or "", _postgres_mb(url)
        kind = f"A Postgres 15 store (database {stem})"
    else:
        path = args.dir / f"scale-{args.checkpoints}-{threads}.db"
        built = "reused"
        if not path.exists():
            print(f"building {path.name} ...", flush=True)
            built = f"built in {build(path, args.checkpoints, threads):.0f} s"
        url, stem, size_mb = f"sqlite:///{path}", path.stem, path.stat().st_size / 2**20
        kind = "A SQLite store"
    print(
        f"store: {args.checkpoints:,} checkpoints, {threads:,} threads, {size_mb:,.0f} MB ({built})"
    )
    if args.build_only:
        return
    load = Path("/proc/loadavg").read_text().split()[0]
    names = [n if n.endswith(".ipynb") else f"{n}.ipynb" for n in args.only or ()]
    rows = [
        _measure(name, url, args.dir / f"run-{stem}", args.timeout)
        for name in names or bundle.NOTEBOOK_NAMES
    ]
    lines = [
        f"`python benchmarks/bench_scale.py --checkpoints {args.checkpoints} --threads {threads} "
        f"--backend {args.backend}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python "
        f"{platform.python_version()}; {platform.machine()}, load average {load} at the start "
        f"and {Path('/proc/loadavg').read_text().split()[0]} at the end. {kind} of "
        f"{args.checkpoints:,} checkpoints over {threads:,} threads ({size_mb:,.0f} MB, {built}); "
        "each notebook executed once in a fresh kernel, no plane (its sections skipped); peak "
        "resident memory of the kernel process.",
        "",
        "| notebook | wall s | peak kernel MB | within 60 s and 2 GB | failure |",
        "| --- | ---: | ---: | --- | --- |",
        *rows,
    ]
    print("\n".join(lines))
    if not args.no_write:
        heading = f"## Notebooks at scale: {args.checkpoints:,} checkpoints, {args.backend}"
        write_section(heading, heading + "\n\n" + "\n".join(lines) + "\n")


def _measure(name: str, url: str, out: Path, timeout: float) -> str:
    """Run one notebook in a process of its own; its row of the table."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        __file__,
        "--timeout",
        str(timeout),
        "--run-one",
        name,
        url,
        str(out),
    ]
    answer = subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(answer.stdout.strip().splitlines()[-1])
    ok = (
        result["error"] is None and result["seconds"] <= TARGET_S and result["peak_mb"] <= TARGET_MB
    )
    print(name, {k: v for k, v in result.items() if k != "cells"}, flush=True)
    for spent, index, first in result["cells"]:
        print(f"    {spent:7.1f} s  cell {index}: {first}", flush=True)
    return (
        f"| {name} | {result['seconds']:.1f} | {result['peak_mb']:,.0f} | "
        f"{'yes' if ok else 'no'} | {result['error'] or ''} |"
    )


def _postgres_mb(url: str) -> float:
    """The size of the store's database, MB."""
    import psycopg

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return float(size[0] if size else 0) / 2**20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=None, help="default: checkpoints / 5")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--postgres",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a URL of the Postgres server the store's database is created on",
    )
    parser.add_argument(
        "--dir", type=Path, default=SCRATCH, help=f"SQLite stores and executed copies ({SCRATCH})"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--build-only", action="store_true", help="build (or reuse) the store")
    parser.add_argument(
        "--only", action="append", help="this notebook only, e.g. plan_retention (repeatable)"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="nbclient's per-cell limit, s")
    parser.add_argument(
        "--run-one", nargs=3, metavar=("NAME", "URL", "OUT"), help=argparse.SUPPRESS
    )
    return parser


if __name__ == "__main__":
    main()
