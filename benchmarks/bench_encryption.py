"""Benchmark customer-held encryption: put and latest with encryption on beside off, and re-encryption.

Run with ``.venv/bin/python benchmarks/bench_encryption.py [--rows N] [--runs R]``.

* put / latest of ~2 KB chat states (the stores benchmark's ``chat_state``) on SQLite and
  Postgres, one store with a keyring and one without, measured alternately in one run (so both
  see the same machine load); ops/s medians of ``--runs`` runs, the ratio on/off, and what
  encryption adds per operation in µs. Target: ratio ≥ 0.85.
* re-encryption of an SQLite store of ``--rows`` checkpoints (100 per thread) sealed under one
  key, after a second key is put first: the plan's and the apply's rows/s. Target: ≥ 20,000 rows/s
  on 1,000,000 rows.

Results go into the ``## Encryption`` section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_section
from bench_stores import chat_state

import durability
from durability import Checkpoint
from durability.crypto import Keyring
from durability.crypto.reencrypt import apply_reencrypt, plan_reencrypt
from durability.settings import Settings

HEADING = "## Encryption"
REENCRYPT_HEADING = "## Re-encryption"
POSTGRES = os.environ.get(
    "DURABILITY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
PUTS, READS, THREADS = 1500, 1500, 50
K1, K2 = os.urandom(32), os.urandom(32)


def _timed(fn: Callable[[int], None], n: int) -> tuple[float, float]:
    """Ops per second (wall clock) and this process's CPU µs per op."""
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6


def _round(store: Any, states: list[dict[str, Any]], tag: str) -> dict[str, float]:
    threads = [f"{tag}-{uuid.uuid4().hex[:8]}-{i}" for i in range(THREADS)]
    put, put_cpu = _timed(
        lambda i: store.put(Checkpoint(thread_id=threads[i % THREADS], state=states[i])),
        len(states),
    )
    latest, latest_cpu = _timed(
        lambda i: store.latest(threads[i % THREADS]), min(READS, len(states))
    )
    return {"put": put, "latest": latest, "put_cpu": put_cpu, "latest_cpu": latest_cpu}


def put_latest(url: str, runs: int, **options: Any) -> dict[str, dict[str, float]]:
    """Medians of ops/s with encryption off and on, alternating off/on within each run."""
    states = [chat_state(2048, i) for i in range(PUTS)]
    off = durability.open(url, settings=Settings(), **options)
    on = durability.open(url, settings=Settings(), keyring=Keyring({"k1": K1}), **options)
    off.reset()
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    try:
        _round(off, states[:200], "warm")
        _round(on, states[:200], "warm")
        for run in range(runs):
            order = [("off", off), ("on", on)] if run % 2 == 0 else [("on", on), ("off", off)]
            for name, store in order:
                results[name].append(_round(store, states, name))
    finally:
        off.reset()
        on.close()
        off.close()
    return {
        name: {op: statistics.median(r[op] for r in rs) for op in rs[0]}
        for name, rs in results.items()
    }


def micro(n: int = 20_000) -> dict[str, float]:
    """CPU µs to seal and to open one ~2 KB state (deflate + AES-256-GCM, and back), minimum
    of five rounds (the least disturbed by other work)."""
    import orjson

    from durability.crypto.envelope import Sealer

    sealer = Sealer(Keyring({"k1": K1}))
    text = orjson.dumps(chat_state(2048, 3)).decode()
    envelope = sealer.seal(text, "thread-1", "", "cp-1", "state")
    out = {}
    for name, fn in (
        ("seal", lambda: sealer.seal(text, "thread-1", "", "cp-1", "state")),
        ("open", lambda: sealer.open(envelope, "thread-1", "", "cp-1", "state")),
    ):
        rounds = []
        for _ in range(5):
            cpu = time.process_time()
            for _ in range(n // 5):
                fn()
            rounds.append((time.process_time() - cpu) / (n // 5) * 1e6)
        out[name] = min(rounds)
    out["clear_bytes"], out["envelope_bytes"] = len(text), len(envelope)
    return out


def reencrypt(rows: int) -> dict[str, float]:
    """Build an SQLite store of ``rows`` checkpoints under k1, then move them under k2."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/reencrypt.db"
        built = time.perf_counter()
        with durability.open(url, settings=Settings(), keyring=Keyring({"k1": K1})) as store:
            batch = []
            for n in range(rows):
                batch.append(
                    Checkpoint(thread_id=f"t{n // 100}", step=n, state=chat_state(2048, n % 50))
                )
                if len(batch) == 500:
                    store.put_many(batch, synced=True)
                    batch = []
            if batch:
                store.put_many(batch, synced=True)
        built = time.perf_counter() - built
        keyring = Keyring({"k2": K2, "k1": K1})
        with durability.open(url, settings=Settings(), keyring=keyring) as store:
            start = time.perf_counter()
            plan = plan_reencrypt(store)
            planned = time.perf_counter() - start
            cpu = time.process_time()
            report = apply_reencrypt(store, plan, batch=2000)
            cpu = time.process_time() - cpu
            assert plan_reencrypt(store).empty
    return {
        "rows": rows,
        "build_s": built,
        "plan_rows_per_s": rows / planned,
        "apply_rows_per_s": report.rows_per_second,
        "apply_s": report.seconds,
        "apply_cpu_rows_per_s": report.rows / cpu,
        "mb": report.bytes / 1e6,
    }


def _table(name: str, figures: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        f"| {name} | off: ops/s | on: ops/s | on / off (wall) | off: CPU µs/op | on: CPU µs/op "
        "| on / off (CPU) | added CPU per op |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op in ("put", "latest"):
        off, on = figures["off"][op], figures["on"][op]
        off_cpu, on_cpu = figures["off"][op + "_cpu"], figures["on"][op + "_cpu"]
        lines.append(
            f"| {op} 2 KB | {off:,.0f} | {on:,.0f} | {on / off:.2f}× | {off_cpu:,.0f} | "
            f"{on_cpu:,.0f} | {off_cpu / on_cpu:.2f}× | {on_cpu - off_cpu:+.0f} µs |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="0: skip re-encryption")
    parser.add_argument("--runs", type=int, default=5, help="0: skip put and latest")
    args = parser.parse_args()
    import cryptography

    setup = (
        f"{datetime.now(UTC):%Y-%m-%d}, Python {platform.python_version()}, cryptography "
        f"{cryptography.__version__}; {platform.machine()}, {os.cpu_count()} cores shared with "
        f"other work (1-minute load average {os.getloadavg()[0]:.1f} at the start), so wall-clock "
        "figures can be several times slower than on an idle machine; CPU time of this process "
        "per operation is the steadier measure (for Postgres it leaves out the server's work, "
        "which makes the on/off ratio conservative)."
    )
    if args.runs:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = put_latest(f"sqlite:///{tmp}/bench.db", args.runs)
        schema = f"bench_crypt_{uuid.uuid4().hex[:8]}"
        try:
            pg = put_latest(POSTGRES, args.runs, schema=schema)
        finally:
            import sqlalchemy as sa

            admin = sa.create_engine(POSTGRES)
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            admin.dispose()
        cost = micro()
        lines = [
            HEADING,
            "",
            f"`python benchmarks/bench_encryption.py --runs {args.runs} --rows 0` — {setup} "
            f"Medians of {args.runs} runs alternating off and on; {PUTS} puts of ~2 KB chat "
            f"states over {THREADS} threads, then {READS} latest reads. Target: on/off ≥ 0.85.",
            "",
            *_table("sqlite", sqlite),
            "",
            *_table("postgres", pg),
            "",
            f"What encryption itself costs, in CPU of this process (best of five rounds): sealing "
            f"a {cost['clear_bytes']:,.0f}-byte state (deflate, then AES-256-GCM; "
            f"{cost['envelope_bytes']:,.0f}-byte envelope) {cost['seal']:.1f} µs, opening it "
            f"{cost['open']:.1f} µs. That is what a put and a latest add.",
            "",
        ]
        _write(HEADING, lines)
    if args.rows:
        re = reencrypt(args.rows)
        lines = [
            REENCRYPT_HEADING,
            "",
            f"`python benchmarks/bench_encryption.py --rows {args.rows} --runs 0` — {setup}",
            "",
            f"Re-encrypting an SQLite store of {re['rows']:,} checkpoints (~2 KB states, 100 per "
            f"thread, {re['mb']:,.0f} MB of envelopes) from k1 to k2: plan "
            f"{re['plan_rows_per_s']:,.0f} rows/s; apply {re['apply_rows_per_s']:,.0f} rows/s "
            f"wall clock ({re['apply_s']:,.1f} s), {re['apply_cpu_rows_per_s']:,.0f} rows per CPU "
            f"second of this process. Building the store took {re['build_s']:,.0f} s. Target: "
            "≥ 20,000 rows/s on 1,000,000 rows.",
            "",
        ]
        _write(REENCRYPT_HEADING, lines)


def _write(heading: str, lines: list[str]) -> None:
    section = "\n".join(lines)
    print(section, flush=True)
    write_section(heading, section)


if __name__ == "__main__":
    main()
