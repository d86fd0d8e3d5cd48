"""The drain to the real plane from a SQLite and a Postgres store, batch sizes alternated (issue 15).

Run with ``PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_drain_stores.py``; set
``DURABILITY_TEST_POSTGRES_URL`` to a database this benchmark may empty (its tables are dropped).
The plane is ``durability plane serve`` (uvicorn on loopback, over SQLite) from
``bench_replication.Plane``. Each store holds ``ROWS`` checkpoints with a ~2 KB state; every
drain re-queues them all and is timed by ``bench_replication.Timed`` (first POST to last ack).
Stores and batch sizes alternate run by run. ``PROFILE=DIR`` writes cProfile files of the
client's drain (``client-<store>-<batch>.prof``). ``BATCHES=500`` picks batch sizes and
``IN_FLIGHT=1,2`` alternates the requests a drain keeps in flight too. Besides rows per second
it prints the CPU each side spends a row: the client's process time and the plane
subprocess's (from ``/proc``), which a loaded machine inflates far less than wall time. Prints
figures only; RESULTS.md is written by hand from them.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from bench_replication import ROOT, Plane, fill, timed_connection

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durability
from durability.replication import drain_once
from durability.settings import Settings

ROWS = int(os.environ.get("ROWS", "20000"))
RUNS = int(os.environ.get("RUNS", "3"))
BATCHES = tuple(int(b) for b in os.environ.get("BATCHES", "500,1000").split(","))
#: ``PLANES=old=/path/to/tree,new=.`` runs one plane per source tree, alternated (default: this one).
PLANES = {
    p.split("=", 1)[0]: Path(p.split("=", 1)[1]).resolve()
    for p in os.environ.get("PLANES", f"this={ROOT}").split(",")
}
#: ``IN_FLIGHT=1,2`` alternates the drain's requests in flight too (unset: the default).
DEPTHS: tuple[int | None, ...] = (
    tuple(int(d) for d in os.environ["IN_FLIGHT"].split(",") if d)
    if os.environ.get("IN_FLIGHT")
    else (None,)
)
PROFILE = os.environ.get("PROFILE")
REQUEUE = (
    "DELETE FROM durability_synced",
    "INSERT INTO durability_outbox (seq, project_id) "
    "SELECT seq, project_id FROM durability_checkpoints",
)


def requeue(url: str) -> None:
    """Every row pending again (the outbox tables, decision 0060)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            for sql in REQUEUE:
                db.execute(sql)
        return
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for sql in REQUEUE:
            conn.execute(sa.text(sql))
    engine.dispose()


def empty_postgres(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        tables = conn.execute(sa.text("SELECT tablename FROM pg_tables WHERE schemaname='public'"))
        for (table,) in tables.fetchall():
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}" CASCADE'))
    engine.dispose()


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain(
    store: Any, plane: Plane, batch: int, depth: int | None, profile: str | None
) -> tuple[float, float, float, float]:
    """Rows per second (first POST to last ack), the client's CPU share of the wall time, and
    the client's and the plane's CPU microseconds per row."""
    options = {"batch_rows": batch} | ({"in_flight": depth} if depth else {})
    conn, timed = timed_connection(store, plane, **options)
    profiler = cProfile.Profile() if profile else None
    plane_cpu = cpu_seconds(plane.process.pid)
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    report = drain_once(conn)
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    plane_cpu = cpu_seconds(plane.process.pid) - plane_cpu
    conn.close()
    assert report.synced == ROWS, report
    assert timed.first is not None
    assert timed.last is not None
    return ROWS / (timed.last - timed.first), cpu / wall, cpu / ROWS * 1e6, plane_cpu / ROWS * 1e6


def main() -> None:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args()
    logging.getLogger("durability.replication").setLevel(logging.ERROR)
    folder = Path(tempfile.mkdtemp(prefix="bench-drain-stores-"))
    urls = {"sqlite": f"sqlite:///{folder / 'drain.db'}"}
    if os.environ.get("DURABILITY_TEST_POSTGRES_URL"):
        urls["postgres"] = os.environ["DURABILITY_TEST_POSTGRES_URL"]
        empty_postgres(urls["postgres"])
    stores = {name: durability.open(url, settings=Settings()) for name, url in urls.items()}
    planes = {name: Plane(folder, root=tree, name=name) for name, tree in PLANES.items()}
    rates: dict[tuple[str, str, int, int | None], list[tuple[float, float, float]]] = {}
    try:
        for store in stores.values():
            fill(store, ROWS)
        print(f"{ROWS} rows per store; load average {os.getloadavg()}", flush=True)
        for run in range(RUNS):
            names = list(stores) if run % 2 == 0 else list(reversed(stores))
            configs = [(p, b, d) for p in planes for b in BATCHES for d in DEPTHS]
            for name in names:
                for plane, batch, depth in configs if run % 2 == 0 else reversed(configs):
                    if run or any(k[0] == name for k in rates):
                        requeue(urls[name])
                    profile = f"{PROFILE}/client-{name}-{batch}.prof" if PROFILE else None
                    rate, share, client_us, plane_us = drain(
                        stores[name], planes[plane], batch, depth, profile
                    )
                    rates.setdefault((name, plane, batch, depth), []).append(
                        (rate, client_us, plane_us)
                    )
                    print(
                        f"{name} plane {plane} batch {batch} in flight {depth or 'default'} "
                        f"run {run + 1}: "
                        f"{rate:,.0f} rows/s (client CPU {share:.0%} of wall, {client_us:.0f} us "
                        f"a row; plane {plane_us:.0f} us a row; load {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
        for (name, plane, batch, depth), values in rates.items():
            print(
                name,
                plane,
                batch,
                depth or "default",
                f"median {statistics.median(v[0] for v in values):,.0f} rows/s,",
                f"client {statistics.median(v[1] for v in values):.0f} us/row,",
                f"plane {statistics.median(v[2] for v in values):.0f} us/row",
                [round(v[0]) for v in values],
            )
    finally:
        for store in stores.values():
            store.close()
        for plane in planes.values():
            plane.stop()


if __name__ == "__main__":
    main()
