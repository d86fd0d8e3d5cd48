"""Benchmark how long one put takes while the drain replicates, with the plane up, down and slow.

Run with ``.venv/bin/python benchmarks/bench_put_latency.py [--old PATH]``. A put must never
wait on the drain: its latency with the plane down or slow should stay within 2x of the
plane-up figures (p50 and p99). For each store (the default SQLite store, and Postgres) and
each plane condition, a writer process connects the store (the drain on its background thread)
and makes ``PUTS`` puts of a ~2 KB state, one every ``PACE`` seconds, timing each; p50, p99 and
max are reported, as medians over ``RUNS`` runs.

* up: this project's plane, ``durability plane serve`` in its own process;
* down: a loopback port nothing listens on (every POST is refused at once);
* slow: the same plane behind a proxy process that holds every ingest ``SLOW_S`` seconds.

``--old PATH`` also measures the code at PATH (e.g. an export of ``main``), alternating old and
new in one run, so both see the same machine load. Results go into the ``## Put latency``
section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import write_section

HEADING = "## Put latency"
ROOT = Path(__file__).resolve().parent.parent
PUTS = 1500
PACE = 0.002
RUNS = 3
SLOW_S = 0.5
POSTGRES = os.environ.get(
    "DURABILITY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

#: The writer, run in its own process against the code at ``sys.argv[1]``.
WRITER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import durability
from durability import Checkpoint
from durability.replication import connect
from durability.settings import Settings

store_url, plane_url, key, puts, pace = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
state = {"messages": [{"role": "user", "content": "lorem ipsum " * 14} for _ in range(12)]}
with durability.open(store_url, settings=Settings()) as store:
    conn = connect(store, plane_url, key, timeout=5.0)
    for n in range(50):  # warm-up: connections, caches, the drain's first passes
        store.put(Checkpoint(thread_id=f"warm-{n % 5}", state=state))
    took = []
    for n in range(puts):
        start = time.perf_counter()
        store.put(Checkpoint(thread_id=f"t-{n % 50}", state={**state, "n": n}))
        took.append(time.perf_counter() - start)
        time.sleep(pace)
    conn.close(timeout=0)
print(json.dumps(took))
"""

#: A proxy in front of the plane that holds each ingest ``SLOW_S`` seconds: ``PORT TARGET``.
SLOW_PROXY = r"""
import asyncio, sys, httpx, uvicorn
port, target, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
client = httpx.AsyncClient(base_url=target, timeout=60)

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"].endswith("/ingest"):
        await asyncio.sleep(delay)
    headers = {k.decode(): v.decode() for k, v in scope["headers"] if k != b"host"}
    answer = await client.request(scope["method"], scope["raw_path"].decode(), content=body, headers=headers)
    await send({"type": "http.response.start", "status": answer.status_code,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer.content})

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(url: str, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/public/v1/policy", timeout=2)
            return
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not start") from None
            time.sleep(0.1)


class Planes:
    """The plane process, its slow proxy, and a port where nothing listens."""

    def __init__(self, workdir: Path) -> None:
        from durability.plane import PlaneStorage

        db = f"sqlite:///{workdir / 'plane.db'}"
        self.key = PlaneStorage(db).create_key("bench", "put-latency", entitled=True).api_key
        port, slow_port = free_port(), free_port()
        self.up = f"http://127.0.0.1:{port}"
        self.slow = f"http://127.0.0.1:{slow_port}"
        self.down = f"http://127.0.0.1:{free_port()}"
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "durability",
                    "plane",
                    "serve",
                    "--db",
                    db,
                    "--port",
                    str(port),
                ],
                cwd=ROOT,
                **quiet,  # type: ignore[arg-type]
            ),
            subprocess.Popen(
                [sys.executable, "-c", SLOW_PROXY, str(slow_port), self.up, str(SLOW_S)],
                **quiet,  # type: ignore[arg-type]
            ),
        ]
        wait_serving(self.up, self.procs[0])
        wait_serving(self.slow, self.procs[1])

    def url(self, condition: str) -> str:
        return {"up": self.up, "down": self.down, "slow": self.slow}[condition]

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(10)


def store_url(kind: str, workdir: Path) -> tuple[str, Any]:
    """A fresh store of ``kind`` and a cleanup for it."""
    if kind == "sqlite":
        path = workdir / f"store-{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{path}", lambda: None
    import sqlalchemy as sa

    schema = f"harden_bench_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(POSTGRES)

    def drop() -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        engine.dispose()

    return f"{POSTGRES}?schema={schema}", drop


def measure(code: Path, kind: str, plane_url: str, key: str, workdir: Path) -> dict[str, float]:
    url, cleanup = store_url(kind, workdir)
    try:
        out = subprocess.run(
            [sys.executable, "-c", WRITER, str(code), url, plane_url, key, str(PUTS), str(PACE)],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
    finally:
        cleanup()
    took = sorted(json.loads(out.strip().splitlines()[-1]))
    return {
        "p50": took[len(took) // 2] * 1000,
        "p99": took[int(len(took) * 0.99)] * 1000,
        "max": took[-1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="also measure the code at this path")
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    codes = {"new": ROOT} | ({"old": args.old.resolve()} if args.old else {})
    figures: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        planes = Planes(workdir)
        try:
            for run in range(RUNS):
                for kind in args.stores.split(","):
                    for condition in ("up", "down", "slow"):
                        for name, code in codes.items():
                            got = measure(code, kind, planes.url(condition), planes.key, workdir)
                            figures.setdefault((name, kind, condition), []).append(got)
                            print(
                                f"run {run + 1} {name:3} {kind:8} {condition:4} "
                                + " ".join(f"{k} {v:7.2f} ms" for k, v in got.items()),
                                flush=True,
                            )
        finally:
            planes.close()
    medians = {
        key: {stat: statistics.median(r[stat] for r in runs) for stat in ("p50", "p99", "max")}
        for key, runs in figures.items()
    }
    write_section(HEADING, report(medians, codes))


def report(medians: dict[tuple[str, str, str], dict[str, float]], codes: dict[str, Path]) -> str:
    lines = [
        HEADING,
        "",
        f"`benchmarks/bench_put_latency.py`: {PUTS} puts of a ~2 KB state, one every {PACE * 1000:g} ms,",
        "on a connected store (the drain on its background thread); the plane up (`durability",
        f"plane serve`), down (nothing listens) and slow (a proxy holding each ingest {SLOW_S:g} s);",
        f"milliseconds per put, medians of {RUNS} runs"
        + (", old (main) and new alternated in one run" if "old" in codes else "")
        + f". {platform.machine()}, 2 cores shared with other developers' work (load was not quiet).",
        "Target: with the plane down or slow, p50 and p99 within 2x of plane-up.",
        "",
        "| code | store | plane | p50 ms | p99 ms | max ms | p50 / up | p99 / up |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (name, kind, condition), m in sorted(medians.items()):
        up = medians[(name, kind, "up")]
        lines.append(
            f"| {name} | {kind} | {condition} | {m['p50']:.2f} | {m['p99']:.2f} | {m['max']:.1f} "
            f"| {m['p50'] / up['p50']:.2f}x | {m['p99'] / up['p99']:.2f}x |"
        )
    lines += [
        "",
        "Old, with the plane down, every put woke the drain, which ran a pass whose refused POST",
        "recorded an attempt on the whole batch (a 500-row UPDATE under SQLite's write lock), so",
        "puts queued behind it. New, a put wakes the drain only when it is idle; while it backs",
        "off, the attempt is recorded once per backoff step. The max (one put in 1,500) is about",
        "the same in every condition, old and new, plane up included: a put that meets one of the",
        "drain's writes (marking a batch synced, or recording an attempt) waits in SQLite's busy",
        "handler, whose sleeps grow to 100 ms steps (not profiled; the figures bound it).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
