"""Benchmark durability.simulate on synthetic frames with the contract's columns and dtypes.

Run with ``python benchmarks/bench_simulate.py [--runs 3]``. Targets (issue 7): daily counts
over 90 days for 100,000 threads x 50 settings in <= 2 s, and for 1,000,000 threads x 10
settings in <= 5 s. The threads frames are built before timing (all 18 columns of
``frames.threads``, with the dtypes ``frames.COLUMNS`` documents): newest checkpoints spread
over 60 days, 60 % of threads marked finished, 20 % declaring a waiting and 20 % a finished
value, 2 % parked, 1 % holding a lease. Only the simulation call is timed; the figure is the
median of ``--runs`` runs. Also timed, without targets: :func:`lost_conversations` over the
1,000,000 threads and :func:`outage_backlog` over 1,000,000 checkpoints. No peer library
simulates retention policies, so there is nothing to put beside these figures.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import publish

from durability.simulate import Policy, daily, lost_conversations, outage_backlog

HEADING = "## Simulation"
NOW = pd.Timestamp("2026-12-01", tz="UTC")
DAYS = 90


def synthetic_threads(n: int, seed: int = 7) -> pd.DataFrame:
    """A threads frame of ``n`` rows with every column of the contract."""
    rng = np.random.default_rng(seed)
    newest = NOW - pd.to_timedelta(rng.integers(0, 60 * 86_400, n), unit="s")
    first = newest - pd.to_timedelta(rng.integers(0, 5 * 86_400, n), unit="s")
    finished = rng.random(n) < 0.6
    parked = (rng.random(n) < 0.02) & ~finished
    leased = rng.random(n) < 0.01

    def where(mask: Any, values: Any, dtype: str) -> pd.Series[Any]:
        return pd.Series(values).where(mask).astype(dtype)

    return pd.DataFrame(
        {
            "thread_id": pd.array([f"thread-{i}" for i in range(n)], dtype="string"),
            "owner": pd.array(rng.choice(["minted", "conversations", "support"], n), "string"),
            "run_id": pd.array([f"run-{i}" for i in range(n)], dtype="string"),
            "status": pd.Categorical(rng.choice(["completed", "failed", "interrupted"], n)),
            "checkpoints": rng.integers(1, 50, n).astype(np.int64),
            "size_bytes": rng.integers(2_000, 2_000_000, n).astype(np.int64),
            "first_at": pd.Series(first).astype("datetime64[ns, UTC]"),
            "newest_at": pd.Series(newest).astype("datetime64[ns, UTC]"),
            "started_at": pd.Series(first).astype("datetime64[ns, UTC]"),
            "finished_at": where(finished, newest, "datetime64[ns, UTC]"),
            "due_at": where(finished, newest + pd.Timedelta(days=7), "datetime64[ns, UTC]"),
            "declared_waiting": where(
                rng.random(n) < 0.2,
                pd.to_timedelta(rng.choice([3, 7, 14], n), unit="D"),
                "timedelta64[ns]",
            ),
            "declared_finished": where(
                rng.random(n) < 0.2,
                pd.to_timedelta(rng.choice([1, 2], n), unit="D"),
                "timedelta64[ns]",
            ),
            "max_idle_gap": pd.Series(
                pd.to_timedelta(rng.exponential(86_400, n).astype(np.int64), unit="s")
            ).astype("timedelta64[ns]"),
            "lease_holder": pd.array(np.where(leased, "worker-1", None), dtype="string"),
            "lease_expires_at": where(
                leased, [NOW + pd.Timedelta(seconds=30)] * n, "datetime64[ns, UTC]"
            ),
            "parked": parked,
            "park_deadline": where(parked, newest + pd.Timedelta(days=3), "datetime64[ns, UTC]"),
        }
    )


def synthetic_checkpoints(n: int, seed: int = 7) -> pd.DataFrame:
    """The ``created_at`` column of a checkpoints frame: ``n`` writes over 30 days."""
    rng = np.random.default_rng(seed)
    created = NOW - pd.to_timedelta(np.sort(rng.integers(0, 30 * 86_400, n)), unit="s")
    return pd.DataFrame({"created_at": pd.Series(created).astype("datetime64[ns, UTC]")})


def policies(count: int) -> list[Policy]:
    """``count`` distinct (waiting, finished) settings: waiting 1..60 days, finished 1..14."""
    waiting = np.linspace(1, 60, count)
    return [
        Policy(timedelta(days=float(w)), timedelta(days=float(min(w, 1 + i % 14))))
        for i, w in enumerate(waiting)
    ]


def median_seconds(call: Callable[[], Any], runs: int) -> float:
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not update RESULTS.md")
    args = parser.parse_args()
    start = datetime(2026, 12, 1, tzinfo=UTC)
    small, big = synthetic_threads(100_000), synthetic_threads(1_000_000)
    checkpoints = synthetic_checkpoints(1_000_000)
    rows = []
    for label, frame, count, target in (
        ("100,000 threads x 50 settings, 90 days", small, 50, 2.0),
        ("1,000,000 threads x 10 settings, 90 days", big, 10, 5.0),
    ):
        chosen = policies(count)
        daily(frame, chosen[:1], start, 2)  # warm-up: imports and first-call allocations
        seconds = median_seconds(lambda f=frame, c=chosen: daily(f, c, start, DAYS), args.runs)
        rows.append((f"`daily`: {label}", seconds, f"<= {target:g} s", seconds <= target))
        print(rows[-1], flush=True)
    seconds = median_seconds(lambda: lost_conversations(big, timedelta(days=3)), args.runs)
    rows.append(("`lost_conversations`: 1,000,000 threads", seconds, "-", None))
    print(rows[-1], flush=True)
    outage = start - timedelta(days=10)
    seconds = median_seconds(
        lambda: outage_backlog(checkpoints, outage, timedelta(hours=6), 50.0), args.runs
    )
    rows.append(
        ("`outage_backlog`: 1,000,000 checkpoints, 6 h outage, 50 rows/s", seconds, "-", None)
    )
    print(rows[-1], flush=True)
    section = render(rows, args.runs)
    publish(HEADING, section, write=not args.no_write)


def render(rows: list[tuple[str, float, str, bool | None]], runs: int) -> str:
    load = _load()
    lines = [
        HEADING,
        "",
        f"`python benchmarks/bench_simulate.py --runs {runs}` — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"numpy {np.__version__}, pandas {pd.__version__}; {platform.machine()}, "
        f"{_cpus()} CPUs{load}. Synthetic threads frames with all 18 columns of "
        "`frames.threads` (dtypes as `frames.COLUMNS`), built before timing; medians of "
        f"{runs} runs of the call alone.",
        "",
        "| workload | median s | target | |",
        "| --- | ---: | --- | --- |",
    ]
    for label, seconds, target, met in rows:
        verdict = "" if met is None else ("met" if met else "**missed**")
        lines.append(f"| {label} | {seconds:.3f} | {target} | {verdict} |")
    lines += [
        "",
        "No peer exists: none of the reference systems (LangGraph, DBOS, Temporal, Restate, "
        "Litestream, Airflow, Prefect, Celery) simulates a retention policy over its threads, "
        "so there is no figure to put beside these. The cost is one pass per policy over the "
        "threads (numpy `searchsorted` + `bincount` against the day grid); the retention rules "
        "of `durability.settings` are called once per distinct declared retention, not per "
        "thread.",
        "",
    ]
    return "\n".join(lines)


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def _load() -> str:
    try:
        import os

        return f", load average {os.getloadavg()[0]:.1f} at the start"
    except OSError:  # pragma: no cover - no load average on this platform
        return ""


if __name__ == "__main__":
    main()
