"""The hot paths of two versions of durability, alternated in one run.

``python benchmarks/compare_versions.py OLD_TREE NEW_TREE [--runs 5]`` runs each measurement
in a fresh process with ``PYTHONPATH`` set to one source tree, then the other, ``--runs`` times
in alternation (each run swapping which goes first), and prints the median of each with the
ratio new/old (throughputs: above 1 is faster). Both trees must be checkouts of this
repository; only public API both have is used: put, latest, history, the drain's fetch and ack,
delete_thread, the sweep (plan and delete), and two frames. PostgreSQL and Redis are measured
when they answer on the test URLs (``DURABILITY_TEST_POSTGRES_URL`` and
``DURABILITY_TEST_REDIS_URL`` as for the tests; Redis under a key prefix of its own, removed
afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid

#: The test servers' URLs (the test suite's environment variables, when set).
POSTGRES = os.environ.get(
    "DURABILITY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("DURABILITY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

#: One measurement: runs in a child process, prints {"name": ops per second, ...}.
CHILD = r"""
import json, sys, time, uuid
from datetime import UTC, datetime, timedelta
import durability
from durability import Checkpoint
from durability.clock import FrozenClock

url, kind = sys.argv[1], sys.argv[2]
state = {"messages": [{"role": "user", "content": "x" * 180, "n": i} for i in range(9)]}
out = {}

def rate(n, fn, repeat=1):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best

if kind == "store":
    with durability.open(url) as store:
        store.put(Checkpoint(thread_id="warm", state=state))
        n = 1000
        puts = iter(range(10**9))
        out["put"] = rate(n, lambda: [store.put(Checkpoint(thread_id=f"t{next(puts) % 50}", state=state)) for _ in range(n)], repeat=3)
        out["latest"] = rate(n, lambda: [store.latest(f"t{i % 50}") for i in range(n)], repeat=3)
        out["history (60 rows)"] = rate(100, lambda: [store.history(f"t{i % 50}") for i in range(100)], repeat=3)
        def drain():
            while rows := store.fetch_unsynced_encoded(limit=500):
                store.mark_sent([(r.thread_id, r.seq) for r in rows])
        out["drain fetch+ack"] = rate(3 * n + 1, drain)
        out["delete_thread (threads/s)"] = rate(50, lambda: [store.delete_thread(f"t{i}") for i in range(50)])
elif kind == "sweep":
    from durability.settings import Settings
    from durability.sweep import plan_sweep, sweep
    clock = FrozenClock(datetime(2026, 1, 1, tzinfo=UTC))
    settings = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))
    with durability.open(url, clock=clock, settings=settings) as store:
        n = 5000
        for start in range(0, n, 500):
            store.put_many([Checkpoint(thread_id=f"s{i}", state={"i": i}) for i in range(start, start + 500)])
        clock.advance(timedelta(days=40))
        plan_sweep(store)  # warm: the first plan pays for compiling its statements
        out["sweep plan (threads/s)"] = rate(n, lambda: plan_sweep(store), repeat=3)
        out["sweep (threads/s)"] = rate(n, lambda: sweep(store))
elif kind == "frames":
    from durability import frames
    with durability.open(url) as store:
        n = 20000
        for start in range(0, n, 500):
            store.put_many([Checkpoint(thread_id=f"f{i % 4000}", state={"i": i}) for i in range(start, start + 500)])
        frames.threads(store)  # warm
        out["frames.threads (threads/s)"] = rate(4000, lambda: frames.threads(store), repeat=3)
        out["frames.checkpoints (rows/s)"] = rate(n, lambda: frames.checkpoints(store), repeat=3)
print(json.dumps(out))
"""


def _measure(tree: str, url: str, kind: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, url, kind],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        if "?schema=" in url:
            _drop_schema(url.partition("?schema=")[2])
        if "?prefix=" in url:
            _drop_prefix(url.partition("?prefix=")[2])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _drop_schema(schema: str) -> None:
    import sqlalchemy as sa

    with sa.create_engine(POSTGRES).begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _drop_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.unlink(key)
    client.close()


def _redis_up() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(REDIS).ping())
    except Exception:
        return False


def _postgres_up() -> bool:
    try:
        import sqlalchemy as sa

        with sa.create_engine(POSTGRES).connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return True
    except Exception:
        return False


def _urls(tmp: str, kind: str) -> list[tuple[str, str]]:
    """(label, url) of fresh locations for one measurement of ``kind``."""
    tag = uuid.uuid4().hex[:10]
    urls = [("sqlite", f"sqlite:///{tmp}/{kind}-{tag}.db")]
    if _postgres_up():
        urls.append(("postgres", f"{POSTGRES}?schema=bench_{kind}_{tag}"))
    if kind == "store" and _redis_up():
        urls.append(("redis", f"{REDIS}?prefix=bench-{kind}-{tag}:"))
    return urls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kinds", nargs="+", default=["store", "sweep", "frames"])
    args = parser.parse_args()
    results: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            order = [("old", args.old), ("new", args.new)]
            for kind in args.kinds:
                # Each run swaps which version goes first: a server still settling after the
                # first one's load (Postgres autovacuum) must not always favour the same one.
                for version, tree in order if run % 2 == 0 else order[::-1]:
                    for label, url in _urls(tmp, kind):
                        for name, value in _measure(tree, url, kind).items():
                            results.setdefault((label, name, version), []).append(value)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    print("| store | measure | old (median/s) | new (median/s) | new/old |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, name, version in sorted(results):
        if version != "old":
            continue
        old = statistics.median(results[(label, name, "old")])
        new = statistics.median(results[(label, name, "new")])
        print(f"| {label} | {name} | {old:,.0f} | {new:,.0f} | {new / old:.2f}× |")


if __name__ == "__main__":
    main()
