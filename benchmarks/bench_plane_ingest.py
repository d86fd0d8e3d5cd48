"""The plane's ingest alone: prepared 500-row bodies posted to ``durability plane serve`` (issue 15).

Run with ``PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_plane_ingest.py``. The bodies are
what the drain sends for ``ROWS`` stored checkpoints of ~2 KB (``bench_replication.fill``),
mapped once before timing, so the client costs only the HTTP call: what is measured is how
fast the plane takes batches, and its CPU a row (from ``/proc``). ``PLANES=old=DIR,new=DIR``
serves one plane per source tree; planes and the requests in flight (``IN_FLIGHT=1,2``) are
alternated run by run, each run into a fresh tenant. Prints figures only.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from bench_drain_stores import PLANES, cpu_seconds
from bench_replication import Plane, fill

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durability
from durability.replication.wire import to_wire
from durability.settings import Settings

ROWS = int(os.environ.get("ROWS", "20000"))
RUNS = int(os.environ.get("RUNS", "3"))
DEPTHS = tuple(int(d) for d in os.environ.get("IN_FLIGHT", "1,2").split(","))


def bodies(folder: Path) -> list[bytes]:
    with durability.open(f"sqlite:///{folder / 'source.db'}", settings=Settings()) as store:
        fill(store, ROWS)
        rows = store.fetch_unsynced_encoded(limit=ROWS)
    return [
        b'{"checkpoints":[' + b",".join(to_wire(r).body for r in rows[i : i + 500]) + b"]}"
        for i in range(0, len(rows), 500)
    ]


def post_all(plane: Plane, batches: list[bytes], depth: int) -> tuple[float, float]:
    """Rows per second and the plane's CPU microseconds a row, ``depth`` requests in flight."""
    headers = {"X-API-Key": plane.key(), "Content-Type": "application/json"}
    url = plane.url + "/public/v1/checkpoints/ingest"
    with httpx.Client(timeout=120) as http:

        def post(body: bytes) -> None:
            answer = http.post(url, content=body, headers=headers)
            assert answer.status_code == 201, answer.text[:200]

        cpu, wall = cpu_seconds(plane.process.pid), time.perf_counter()
        with ThreadPoolExecutor(depth) as pool:
            list(pool.map(post, batches))
        wall, cpu = time.perf_counter() - wall, cpu_seconds(plane.process.pid) - cpu
    return ROWS / wall, cpu / ROWS * 1e6


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-plane-ingest-"))
    batches = bodies(folder)
    planes = {name: Plane(folder, root=tree, name=name) for name, tree in PLANES.items()}
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        print(f"{len(batches)} bodies of 500 rows; load average {os.getloadavg()}", flush=True)
        configs = [(name, depth) for name in planes for depth in DEPTHS]
        for run in range(RUNS):
            for name, depth in configs if run % 2 == 0 else reversed(configs):
                rate, plane_us = post_all(planes[name], batches, depth)
                figures.setdefault((name, depth), []).append((rate, plane_us))
                print(
                    f"plane {name} in flight {depth} run {run + 1}: {rate:,.0f} rows/s, plane "
                    f"{plane_us:.0f} us a row (load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
        for (name, depth), values in figures.items():
            print(
                name,
                depth,
                f"median {statistics.median(v[0] for v in values):,.0f} rows/s,",
                f"plane {statistics.median(v[1] for v in values):.0f} us/row",
                [round(v[0]) for v in values],
            )
    finally:
        for plane in planes.values():
            plane.stop()


if __name__ == "__main__":
    main()
