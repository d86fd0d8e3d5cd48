"""The notebooks on production-sized stores: wall time and peak kernel memory of each (issue 16).

Run with ``python benchmarks/bench_scale.py --checkpoints 1000000 [--threads N] [--no-write]``.
It builds a SQLite store of that many checkpoints once, by bulk SQL (five rows per thread by
default: a start, three steps and a run end; a ~800-byte state; times spread over 60 days; the
ledger filled; all but the newest 1,000 rows acknowledged by a plane), under
``benchmarks/.scratch/`` (git-ignored) and reuses it on later runs. Then it executes each
notebook once on it through ``durability.bundle.execute`` in a process of its own, and reads
the peak resident memory of that process's kernel (``RUSAGE_CHILDREN`` once the kernel has
exited). Targets: 60 s and 2 GB per notebook. Never run by ``.ci/run``; building 10,000,000
rows takes a long time on a 2-core machine (the build's own time is printed).
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
STATE = json.dumps({"topic": "t", "messages": ["x" * 90] * 7})  # ~800 bytes of codec text


def build(path: Path, checkpoints: int, threads: int) -> float:
    """Create the store at ``path`` (schema through the library, rows by bulk SQL); seconds."""
    started = time.perf_counter()
    url = f"sqlite:///{path}"
    with durability.open(url) as store:
        store.record_connection("", "http://plane.invalid")  # it replicates
    per_thread = max(1, checkpoints // threads)
    columns = [*STORED_FIELDS]
    marks = ", ".join("?" * (len(columns) + 2))
    insert = (
        f"INSERT INTO durability_checkpoints (tkey, ckey, {', '.join(columns)}) VALUES ({marks})"
    )
    start_us = int((END - timedelta(days=60)).timestamp() * 1e6)
    span_us = 60 * 86_400 * 1_000_000
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    written = 0
    for t in range(threads):
        thread_id = f"thread-{t:08d}"
        tkey = thread_key(thread_id)
        at = start_us + (t * 7919 % threads) * (span_us // threads)
        rows = []
        for n in range(per_thread if t < threads - 1 else checkpoints - written):
            name = STEPS[min(n, len(STEPS) - 1)] if n < per_thread - 1 else "run_end"
            end = name == "run_end"
            status = ("failed" if t % 10 == 0 else "completed") if end else "completed"
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
                "status": status,
                "iteration": 0,
                "interrupt_reason": None,
                "created_at": at + n * 20_000_000,
                "project_id": "",
                "state": STATE,
                "node_input": "null",
                "node_output": "null",
                "iteration_counters": "{}",
                "interrupt_context": "null",
                "metadata": "{}",
                "size_bytes": len(STATE) + 16,
            }
            ckey = checkpoint_key(thread_id, "", values["checkpoint_id"])
            rows.append((tkey, ckey, *(values[c] for c in columns)))
        db.executemany(insert, rows)
        written += len(rows)
        db.execute(
            "INSERT INTO durability_threads (tkey, thread_id, owner, run_id, started_at, "
            "finished_at, due_at) VALUES (?, ?, 'minted', ?, ?, ?, ?)",
            (tkey, thread_id, f"run-{t}", at, at + 100_000_000, at + 86_400_000_000),
        )
        if t % 20_000 == 0:
            db.commit()
            print(f"  {written:,} checkpoints", flush=True)
    db.execute(
        "INSERT INTO durability_synced (seq, synced_at, attempts) "
        "SELECT o.seq, c.created_at + 60000000, 1 FROM durability_outbox o "
        "JOIN durability_checkpoints c ON c.seq = o.seq WHERE o.seq <= (SELECT MAX(seq) - 1000 FROM durability_outbox)"
    )
    db.execute("DELETE FROM durability_outbox WHERE seq IN (SELECT seq FROM durability_synced)")
    db.commit()
    db.close()
    return time.perf_counter() - started


def run_one(name: str, store_url: str, out: Path) -> None:
    """Execute one notebook (in this process); print its seconds and its kernel's peak RSS."""
    params: dict[str, object] = {"store_url": store_url, "output_dir": str(out / "charts")}
    if name == "plan_retention.ipynb":
        params["now"] = END.isoformat()
    if name == "restore_runs.ipynb":
        params["copy_store"] = False  # a rehearsal copy is a file copy of the store's size
    started = time.perf_counter()
    error = None
    try:
        bundle.execute(bundle.notebook(name), params, out / "executed", cwd=out, timeout=1800)
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
    parser.add_argument(
        "--run-one", nargs=3, metavar=("NAME", "URL", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.run_one:
        name, url, out = args.run_one
        run_one(name, url, Path(out))
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
    load = Path("/proc/loadavg").read_text().split()[0]
    rows = []
    for name in bundle.NOTEBOOK_NAMES:
        out = SCRATCH / f"run-{path.stem}"
        out.mkdir(exist_ok=True)
        answer = subprocess.run(
            [sys.executable, __file__, "--run-one", name, f"sqlite:///{path}", str(out)],
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
        f"{platform.machine()}, load average {load} at the start. A SQLite store of "
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
