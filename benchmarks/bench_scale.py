"""The notebooks on production-sized stores: wall time and peak kernel memory of each (issue 16).

Run with ``python benchmarks/bench_scale.py --checkpoints 1000000 [--threads N] [--no-write]``.
It builds a SQLite store of that many checkpoints once, by bulk SQL (five rows per thread by
default: a start, steps and a run end; states of ~1 KB with a tail of 8 KB and 2 MB ones;
times spread over 60 days; the ledger filled; all but the newest 1,000 rows acknowledged by a
plane; the indexes made after the load), under
``benchmarks/.scratch/`` (git-ignored) and reuses it on later runs. Then it executes each
notebook once on it through ``durability.bundle.execute`` in a process of its own, and reads
the peak resident memory of that process's kernel (``RUSAGE_CHILDREN`` once the kernel has
exited). Targets: 60 s and 2 GB per notebook. Never run by ``.ci/run``; ``--build-only`` builds
(10,000,000 rows: 17 GB, about 40 minutes on a loaded 2-core machine), ``--only NAME`` runs
one notebook, ``--timeout`` is nbclient's per-cell limit.
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
        "INSERT INTO durability_threads (tkey, thread_id, owner, run_id, started_at, "
        "finished_at, due_at) VALUES (?, ?, 'minted', ?, ?, ?, ?)",
        (
            (
                thread_key(f"thread-{t:08d}"),
                f"thread-{t:08d}",
                f"run-{t}",
                at,
                at + 10**8,
                at + 86_400 * 10**6,
            )
            for t in range(threads)
            for at in (_start_of(t, threads),)
        ),
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
    db.commit()
    db.close()
    return time.perf_counter() - started


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
    """Execute one notebook (in this process); print its seconds and its kernel's peak RSS."""
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
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "error": error}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=None, help="default: checkpoints / 5")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--build-only", action="store_true", help="build (or reuse) the store")
    parser.add_argument("--only", action="append", help="this notebook only (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800, help="per notebook, seconds")
    parser.add_argument(
        "--run-one", nargs=3, metavar=("NAME", "URL", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.run_one:
        name, url, out = args.run_one
        run_one(name, url, Path(out), args.timeout)
        return
    threads = args.threads or max(1, args.checkpoints // 5)
    SCRATCH.mkdir(exist_ok=True)
    path = SCRATCH / f"scale-{args.checkpoints}-{threads}.db"
    built = "reused"
    if not path.exists():
        print(f"building {path.name} ...", flush=True)
        built = f"built in {build(path, args.checkpoints, threads):.0f} s"
    size_mb = path.stat().st_size / 2**20
    print(
        f"store: {args.checkpoints:,} checkpoints, {threads:,} threads, {size_mb:,.0f} MB ({built})"
    )
    if args.build_only:
        return
    load = Path("/proc/loadavg").read_text().split()[0]
    rows = []
    for name in args.only or bundle.NOTEBOOK_NAMES:
        out = SCRATCH / f"run-{path.stem}"
        out.mkdir(exist_ok=True)
        answer = subprocess.run(
            [
                sys.executable,
                __file__,
                "--timeout",
                str(args.timeout),
                "--run-one",
                name,
                f"sqlite:///{path}",
                str(out),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(answer.stdout.strip().splitlines()[-1])
        ok = (
            result["error"] is None
            and result["seconds"] <= TARGET_S
            and result["peak_mb"] <= TARGET_MB
        )
        print(name, result, flush=True)
        rows.append(
            f"| {name} | {result['seconds']:.1f} | {result['peak_mb']:,.0f} | "
            f"{'yes' if ok else 'no'} | {result['error'] or ''} |"
        )
    lines = [
        f"`python benchmarks/bench_scale.py --checkpoints {args.checkpoints}` — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}; "
        f"{platform.machine()}, load average {load} at the start and "
        f"{Path('/proc/loadavg').read_text().split()[0]} at the end. A SQLite store of "
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
        heading = f"## Notebooks at scale: {args.checkpoints:,} checkpoints"
        write_section(heading, heading + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
