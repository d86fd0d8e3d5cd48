"""Benchmark the replication drain and poison-row isolation against the real plane on loopback.

Run with ``.venv/bin/python benchmarks/bench_replication.py``. The plane is this project's own,
served by ``durability plane serve`` in a subprocess (so it has a core of its own) over a SQLite
database. Three measurements:

1. **Drain throughput**: 20,000 already-stored checkpoints with a ~2 KB state in a SQLite store,
   drained by ``drain_once`` (batches of 500 rows / 4 MiB), timed from the first POST to the
   last ack; 3 runs (each a fresh tenant, the same rows re-queued), median. In the same run the
   fastaiagent SDK 1.94.0 (its ``SQLiteCheckpointer`` and its own drain, in a subprocess) drains
   20,000 rows of the same size into the same plane, timed from ``connect()`` to its last ack.
2. **Isolation in compatibility mode** (whole-batch 413/422): k poison rows at random positions in
   one batch of n; requests and bytes sent relative to the batch's payload, against the bound
   k·⌈log2 n⌉ + 1. Also with the plane's naming of the offender ignored (blind isolation, what a
   foreign plane that names nothing gets), against the client's own blind bound
   k·(⌈log2 n⌉ + 2) + 1.
3. **Default mode** (per-item rejections): the same batches take one request.

Target: drain ≥ 5,000 checkpoints/s. Results go into the ``## Replication`` section of
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from _results import write_section

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durability
from durability import Checkpoint
from durability.plane import PlaneStorage
from durability.replication import PlaneLimits, connect, drain_once
from durability.replication.client import IngestAnswer
from durability.settings import Settings

HEADING = "## Replication"
ROWS = 20_000
RUNS = 3
TARGET = 5_000
NO_LOCAL_CAPS = PlaneLimits(state_bytes=10**12, step_type_chars=10**9, agent_id_chars=10**9)
ROOT = Path(__file__).resolve().parent.parent


def state(n: int) -> dict[str, Any]:
    """A ~2 KB chat-like state."""
    return {
        "messages": [
            {
                "role": "user" if i % 2 else "assistant",
                "content": f"message {n}-{i} " + "lorem ipsum " * 12,
            }
            for i in range(12)
        ],
        "turn": n,
    }


def fill(store: Any, rows: int) -> None:
    """``rows`` checkpoints of a ~2 KB state, 20 per run thread, put 1,000 at a time."""
    for start in range(0, rows, 1000):
        store.put_many(
            [
                Checkpoint(
                    thread_id=f"run-{n // 20}",
                    node_id=f"turn:{n % 20}",
                    step=n % 20,
                    state=state(n),
                )
                for n in range(start, min(start + 1000, rows))
            ]
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Plane:
    """``durability plane serve`` in a subprocess."""

    def __init__(
        self, folder: Path, *, compat: bool = False, root: Path = ROOT, name: str = "plane"
    ) -> None:
        """``root``: the source tree the plane runs from (another tree's plane, compared)."""
        self.db = f"sqlite:///{folder / ('compat' if compat else name)}.db"
        self.storage = PlaneStorage(self.db)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["plane", "serve", "--db", self.db, "--port", str(self.port)] + (
            ["--compat"] if compat else []
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from durability.cli import main; main()", *args],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        key = self.key()
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.url + "/public/v1/auth/check", headers={"X-API-Key": key})
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the plane did not start") from None
                time.sleep(0.1)

    def key(self) -> str:
        return self.storage.create_key(f"d-{random.random()}", "bench", entitled=True).api_key

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.storage.close()


class Timed:
    """Wraps a connection's ``ingest``: when the first POST started and the last ack arrived."""

    def __init__(self, conn: Any, *, blind: bool = False) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.blind = blind
        self._ingest = conn.client.ingest
        conn.client.ingest = self.ingest

    def ingest(self, body: bytes, batch_ids: set[str]) -> IngestAnswer:
        start = time.perf_counter()
        self.first = self.first if self.first is not None else start
        answer = self._ingest(body, batch_ids)
        self.last = time.perf_counter()
        return replace(answer, named=()) if self.blind else answer


def timed_connection(store: Any, plane: Plane, *, blind: bool = False, **options: Any) -> Any:
    conn = connect(store, plane.url, plane.key(), background=False, **options)
    return conn, Timed(conn, blind=blind)


def bench_drain(folder: Path, plane: Plane) -> list[float]:
    url = f"sqlite:///{folder / 'drain.db'}"
    with durability.open(url, settings=Settings()) as store:
        fill(store, ROWS)
        size = store.outbox(limit=1)[0].size_bytes
        print(f"stored {ROWS} checkpoints of {size} bytes each")
        rates = []
        for run in range(RUNS):
            if run:
                with sqlite3.connect(folder / "drain.db") as db:
                    # Every row pending again (the outbox tables, decision 0060).
                    db.execute("DELETE FROM durability_synced")
                    db.execute(
                        "INSERT INTO durability_outbox (seq, project_id) "
                        "SELECT seq, project_id FROM durability_checkpoints"
                    )
            conn, timed = timed_connection(store, plane)
            report = drain_once(conn)
            assert report.synced == ROWS, report
            assert timed.first is not None
            assert timed.last is not None
            rates.append(ROWS / (timed.last - timed.first))
            print(f"run {run + 1}: {rates[-1]:,.0f} checkpoints/s ({report.requests} requests)")
            conn.close()
    return rates


SDK_DRAIN = textwrap.dedent(
    """
    import json, sqlite3, sys, time
    import fastaiagent as fa
    from fastaiagent.chain.checkpoint import Checkpoint
    from fastaiagent.checkpointers.sqlite import SQLiteCheckpointer

    url, key, db, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = SQLiteCheckpointer(db_path=db)
    store.setup()
    for n in range(rows):
        store.put(Checkpoint(chain_name="bench", execution_id=f"run-{n // 20}", node_id=f"turn:{n % 20}", node_index=n % 20,
                             state_snapshot=json.loads(sys.argv[5]) | {"turn": n}))
    def unsynced():
        with sqlite3.connect(db) as c:
            return c.execute("select count(*) from checkpoints where synced = 0").fetchone()[0]
    assert unsynced() == rows
    started = time.perf_counter()
    fa.connect(api_key=key, target=url, export_traces=False)
    while unsynced():
        time.sleep(0.005)
    print(json.dumps({"seconds": time.perf_counter() - started}))
    """
)


def bench_sdk(folder: Path, plane: Plane) -> float | None:
    try:
        sdk_version = version("fastaiagent")
    except Exception:
        return None
    env = {**os.environ, "FASTAIAGENT_LOCAL_DB": str(folder / "sdk-local.db")}
    import json

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SDK_DRAIN,
            plane.url,
            plane.key(),
            str(folder / "sdk.db"),
            str(ROWS),
            json.dumps(state(0)),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        print(done.stderr[-2000:])
        return None
    seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    print(f"fastaiagent {sdk_version}: {ROWS / seconds:,.0f} checkpoints/s")
    return ROWS / seconds


def bench_isolation(
    folder: Path, plane: Plane, *, n: int, k: int, blind: bool, seed: int
) -> dict[str, Any]:
    url = f"sqlite:///{folder / f'iso-{n}-{k}-{blind}-{seed}.db'}"
    poison = set(random.Random(seed).sample(range(n), k))
    with durability.open(url, settings=Settings()) as store:
        store.put_many(
            [
                Checkpoint(
                    thread_id="iso",
                    node_id=f"n{i}",
                    step_type="s" * 50 if i in poison else "node",
                    state=state(i),
                )
                for i in range(n)
            ]
        )
        conn, _ = timed_connection(
            store, plane, blind=blind, limits=NO_LOCAL_CAPS, batch_rows=n, batch_bytes=10**9
        )
        batch = len(b",".join(r.body for r in _wire_rows(store)))
        report = drain_once(conn)
        conn.close()
    assert report.quarantined == k, report
    assert report.synced == n - k, report
    return {
        "requests": report.requests,
        "ratio": report.bytes_sent / batch,
        "bound": k * math.ceil(math.log2(n)) + 1,
    }


def _wire_rows(store: Any) -> list[Any]:
    from durability.replication.wire import to_wire

    return [to_wire(r) for r in store.fetch_unsynced_encoded(limit=10**6)]


def main() -> None:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args()
    logging.getLogger("durability.replication").setLevel(logging.ERROR)
    load_before = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    plane = Plane(folder)
    compat = Plane(folder, compat=True)
    try:
        rates = bench_drain(folder, plane)
        sdk = bench_sdk(folder, plane)
        iso_rows = []
        for n, k in ((64, 1), (512, 1), (512, 4), (512, 16)):
            named = [
                bench_isolation(folder, compat, n=n, k=k, blind=False, seed=s) for s in range(3)
            ]
            blind = [
                bench_isolation(folder, compat, n=n, k=k, blind=True, seed=s) for s in range(3)
            ]
            default = bench_isolation(folder, plane, n=n, k=k, blind=False, seed=0)
            iso_rows.append((n, k, named, blind, default))
            print(
                n,
                k,
                [r["requests"] for r in named],
                [r["requests"] for r in blind],
                default["requests"],
            )
    finally:
        plane.stop()
        compat.stop()
    write_section(HEADING, render(rates, sdk, iso_rows, (load_before, os.getloadavg())))


REMAINS = (
    "**Where the time goes now (py-spy of two drains, client and plane processes separately).** Per 500-row "
    "batch (~1.4 MB) each side uses about 60 ms of CPU. The client spends ~45 % of it in the one `UPDATE` that "
    "acks a batch (`Store.mark_sent`: SQLite rewrites each ~2.3 KB row to flip its flags and commits ~2 MB of "
    "WAL), ~17 % reading the next batch (driver SQL, past the rows in flight) and ~22 % building wire items; the "
    "plane ~40 % in SQLite (executemany and commit), ~20 % parsing the body with orjson, ~13 % validating items "
    "and ~8 % in h11. The two overlap (one POST in flight while the next batch is read and mapped and the last "
    "one marked), so the rate follows whichever side the other load on this 2-core machine slows more. What "
    "would take more: the outbox flags in a narrow side table (an ack would rewrite a few bytes per row, not "
    "2.3 KB; a SQL-store migration), and decoding the plane's body with `msgspec`, keeping `state_snapshot` and "
    "`metadata` raw (17 → 6 ms per batch in isolation; a new dependency, and the plane would store the "
    "client's JSON text as sent)."
)


def render(
    rates: list[float],
    sdk: float | None,
    iso_rows: list[Any],
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> str:
    median = statistics.median(rates)
    versions = ", ".join(
        f"{name} {version(name)}"
        for name in ("httpx", "uvicorn", "starlette", "sqlalchemy", "orjson")
    )
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python benchmarks/bench_replication.py`, {time.strftime('%Y-%m-%d')} — Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores shared with other work "
        f"(load average {load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end), {versions}; the plane "
        "(`durability plane serve`, SQLite) in its own process on loopback.",
        "",
        "### Drain of 20,000 stored 2 KB checkpoints, first POST to last ack",
        "",
        "| client | checkpoints/s (median of runs) | runs | target |",
        "| --- | ---: | --- | --- |",
        f"| durability `drain_once` (500 rows / 4 MiB per batch) | {median:,.0f} | {', '.join(f'{r:,.0f}' for r in rates)} | ≥ {TARGET:,} {'✅' if median >= TARGET else '❌'} |",
    ]
    if sdk is not None:
        lines.append(
            f"| fastaiagent {version('fastaiagent')} drain (its own, 200 rows per batch), same plane | {sdk:,.0f} | 1 (connect → last ack) | — |"
        )
    lines += [
        "",
        f"Ratio to the {TARGET:,}/s target: **{median / TARGET:.2f}×**; to the ~2,500/s the fastaiagent SDK manages to "
        f"a stub plane: **{median / 2_500:.1f}×**"
        + (
            f"; to the SDK into this plane in the same run: **{median / sdk:.1f}×**."
            if sdk
            else "."
        ),
        "",
        REMAINS,
        "",
        "### Isolating k poison rows in one batch of n",
        "",
        "Requests (median of 3 random placements) and bytes sent relative to the batch's payload. *Named*: this "
        "plane's compatibility mode names the first offender in its 413/422; the client quarantines it with the "
        "plane's reason and resends the rest together (k + 1 requests). *Blind*: the naming ignored (a plane that "
        "names nothing): only the left half of a refused group is posted; if it lands the offender is in the right "
        "half, which is split without being posted whole; the right halves of refused left halves wait and go in "
        "one request once the offender is alone (at most k·(⌈log2 n⌉ + 2) + 1 requests).",
        "",
        "| n | k | bound k·⌈log2 n⌉+1 | compat, named: requests | bytes × batch | compat, blind: requests | blind bound k·(⌈log2 n⌉+2)+1 | bytes × batch | default mode: requests |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, k, named, blind, default in iso_rows:
        med = statistics.median
        blind_bound = k * (math.ceil(math.log2(n)) + 2) + 1
        lines.append(
            f"| {n} | {k} | {named[0]['bound']} | {med(r['requests'] for r in named):.0f} | {med(r['ratio'] for r in named):.2f} | "
            f"{med(r['requests'] for r in blind):.0f} | {blind_bound} | {med(r['ratio'] for r in blind):.2f} | {default['requests']} |"
        )
    lines += [
        "",
        "Named, the bound holds for every n ≥ 2 with k ≥ 1 offenders. Blind, no scheme meets k·⌈log2 n⌉ + 1 in the "
        "worst case: for n = 2 and k = 1 with the offender first, a client that quarantines only a row the plane "
        "refused alone (so that a refusal of a body's total size never quarantines a good row) needs 3 requests, "
        "the bound allows 2. Blind, one offender costs this client ⌈log2 n⌉ + 2 or ⌈log2 n⌉ + 3 requests (+ 3 when "
        "its left sibling landed, so it is tried alone, and rows also waited behind a refused half). Blind, many "
        "offenders cost more bytes than the old halving (each one resends what waited), in fewer requests.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
