"""A SQLite put beside SqliteSaver and the engine's floor, with WAL bytes and fsyncs per put.

Run with ``python benchmarks/bench_put_floor.py [--runs 5]`` (needs the ``bench`` extra).

Subjects, at ``synchronous=NORMAL`` and at ``FULL``: durability's SQLite store, LangGraph's
SqliteSaver, and the *floor*: a bare ``sqlite3`` loop inserting the same rows (the same codec
texts, the thread id) into a table with only an integer primary key, in WAL mode, one
autocommitted INSERT per put. Each run writes 2,000 puts of a 2 KB chat state round-robin over
100 threads into fresh files, the subjects of one setting taking turns every 20 puts; the
figure is the median of ``--runs`` runs. WAL bytes per put are read from the WAL file's growth
with checkpoints held off; fsyncs per put are counted by ``strace -f -c`` around a run of its
own (omitted when strace is missing). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stores import THREADS, Ours, Saver, _interleaved, chat_state

import durability
from durability import codec
from durability.settings import Settings

PUTS = 2_000
CHUNK = 20
SETTINGS = ("NORMAL", "FULL")
KINDS = ("durability", "SqliteSaver", "floor")


class Floor:
    """The engine's limit: one INSERT of the same texts into a primary-key-only table."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, thread TEXT, body TEXT)")

    def prepare(self, items: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        return [(thread, codec.dumps(state)) for thread, state in items]

    def put(self, prepared: Any) -> None:
        self.conn.execute("INSERT INTO floor (thread, body) VALUES (?, ?)", prepared)


@contextmanager
def subject(kind: str, folder: str, synchronous: str) -> Iterator[tuple[Any, str]]:
    """The subject and the path of its database file (its WAL is ``path + "-wal"``)."""
    path = f"{folder}/{kind}.db"
    if kind == "durability":
        store = durability.open(
            f"sqlite:///{path}",
            settings=Settings(),
            synchronous=synchronous,
            wal_autocheckpoint=1_000_000,
        )
        with store:
            store.ready()
            yield Ours(store), path
        return
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA wal_autocheckpoint = 1000000")
    if kind == "floor":
        yield Floor(conn), path
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(conn)
        saver.setup()
        yield Saver(saver), path
    conn.close()


def items() -> list[tuple[str, dict[str, Any]]]:
    states = [chat_state(2_048, s) for s in range(PUTS // THREADS)]
    return [(f"thread-{n % THREADS}", states[n // THREADS]) for n in range(PUTS)]


def _put(prepared: list[list[Any]], n: int, i: int, s: Any) -> None:
    s.put(prepared[i][n])


def one_run(synchronous: str, work: list[tuple[str, dict[str, Any]]]) -> dict[str, list[float]]:
    """Puts per second and WAL bytes per put of each kind, taking turns."""
    folder = tempfile.mkdtemp(prefix="bench-floor-")
    try:
        with (
            subject("durability", folder, synchronous) as (ours, ours_path),
            subject("SqliteSaver", folder, synchronous) as (saver, saver_path),
            subject("floor", folder, synchronous) as (floor, floor_path),
        ):
            subjects, paths = [ours, saver, floor], [ours_path, saver_path, floor_path]
            prepared = [s.prepare(work) for s in subjects]
            wal_before = [os.path.getsize(p + "-wal") for p in paths]
            calls: list[Callable[[int, Any], Any]] = [
                functools.partial(_put, prepared, n) for n in range(len(work))
            ]
            spent = _interleaved(subjects, calls, CHUNK)
            wal = [
                (os.path.getsize(p + "-wal") - b) / len(work)
                for p, b in zip(paths, wal_before, strict=True)
            ]
        return {k: [len(work) / t, w] for k, t, w in zip(KINDS, spent, wal, strict=True)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fsyncs(kind: str, synchronous: str) -> float | None:
    """fsync + fdatasync calls per put, counted by strace around a run of ``kind`` alone."""
    if shutil.which("strace") is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        subprocess.run(
            [
                "strace",
                "-f",
                "-c",
                "-o",
                out.name,
                "-e",
                "trace=fsync,fdatasync",
                sys.executable,
                __file__,
                "--alone",
                kind,
                synchronous,
            ],
            check=True,
            capture_output=True,
        )
        text = Path(out.name).read_text()
    calls = sum(
        int(line.split()[3])
        for line in text.splitlines()
        if line.rstrip().endswith(("fsync", "fdatasync"))
    )
    return calls / PUTS


def alone(kind: str, synchronous: str) -> None:
    """Write PUTS puts of ``kind`` and nothing else (what strace counts)."""
    work = items()
    folder = tempfile.mkdtemp(prefix="bench-floor-")
    try:
        with subject(kind, folder, synchronous) as (s, _path):
            for p in s.prepare(work):
                s.put(p)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--alone", nargs=2, metavar=("KIND", "SYNCHRONOUS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alone:
        alone(*args.alone)
        return
    work = items()
    rows: dict[tuple[str, str], list[list[float]]] = {}
    for run in range(args.runs):
        for synchronous in SETTINGS if run % 2 == 0 else reversed(SETTINGS):
            for kind, figures in one_run(synchronous, work).items():
                rows.setdefault((synchronous, kind), []).append(figures)
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    result = {}
    print(
        "| setting | subject | puts/s (median) | vs SqliteSaver | vs floor | WAL bytes/put | fsyncs/put |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for synchronous in SETTINGS:
        med = {k: statistics.median(r[0] for r in rows[(synchronous, k)]) for k in KINDS}
        for kind in KINDS:
            wal = statistics.median(r[1] for r in rows[(synchronous, kind)])
            syncs = fsyncs(kind, synchronous)
            result[f"{synchronous} {kind}"] = {"puts": med[kind], "wal": wal, "fsyncs": syncs}
            print(
                f"| {synchronous} | {kind} | {med[kind]:,.0f} | {med[kind] / med['SqliteSaver']:.2f}x "
                f"| {med[kind] / med['floor']:.2f}x | {wal:,.0f} | "
                f"{'n/a' if syncs is None else f'{syncs:.2f}'} |"
            )
    print(json.dumps(result), file=sys.stderr)


if __name__ == "__main__":
    main()
