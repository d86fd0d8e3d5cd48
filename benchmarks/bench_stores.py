"""Benchmark every durability store beside LangGraph's savers, in one process, on the same data.

Run with ``python benchmarks/bench_stores.py [--backends memory,sqlite,postgres,redis] [--runs 3]``
(needs the ``bench`` extra; Postgres and Redis on loopback, see ``--pg-url`` / ``--redis-url``;
every run uses a throw-away schema or key prefix and removes it).

The method follows LangGraph's own benchmark shape: states are chat-like nested dicts of about 2 KB and
100 KB in which every channel changes at every step; LangGraph checkpoints are built the way a
graph run builds them (v4, uuid6 ids, the saver's own ``get_next_version``, ``versions_seen``,
the parent id from the previous put); every argument is built before timing and only the store
call is timed; each run starts from an empty store; the figure is the median of ``--runs`` runs,
and the subjects of one comparison are open side by side and take turns every few
milliseconds (chunks of calls), so drift on a shared machine hits them alike.

Operations: (a) put, 2 KB state, 5,000 checkpoints round-robin over 100 threads; (b) put, 100 KB
state, 500 checkpoints over 100 threads; (c) the latest checkpoint of each thread (``latest`` /
``get_tuple``), 500 reads at 2 KB and 100 at 100 KB; (d) one thread's 50 checkpoints, consumed
whole (``history`` / ``list``), 20 calls; (e) ``delete_thread`` of the 100 threads (50
checkpoints and one pending write each). Medians go into the ``## Stores`` section of
benchmarks/RESULTS.md, with a profile for every missed target.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _langgraph import Previous, put_args
from _results import publish, top_functions

import durability
from durability import Checkpoint, PendingWrite
from durability.settings import Settings

HEADING = "## Stores"
THREADS = 100
SMALL, BIG = 5_000, 500
SMALL_READS, BIG_READS = 500, 100
LIST_CALLS = 20
OPS = ("put 2 KB", "put 100 KB", "latest 2 KB", "latest 100 KB", "history", "delete_thread")
UNITS = {"history": "checkpoints/s", "delete_thread": "threads/s"}


def chat_state(size: int, step: int) -> dict[str, Any]:
    """A chat-like state of about ``size`` bytes of JSON; every channel depends on ``step``."""
    messages: list[dict[str, Any]] = []
    state: dict[str, Any] = {
        "messages": messages,
        "context": {"user": "u-42", "locale": "en", "step": step, "tags": ["refund", "priority"]},
        "status": f"running-{step}",
        "counter": step,
    }
    n = 0
    while len(orjson.dumps(state)) < size:
        role = "user" if n % 2 else "assistant"
        messages.append(
            {
                "role": role,
                "content": f"message {n} at step {step}: " + "lorem ipsum dolor " * 6,
                "n": n,
            }
        )
        n += 1
    return state


@dataclass
class Workload:
    """Every value the subjects write, built once and shared (the same data for all)."""

    small: list[tuple[str, dict[str, Any]]]
    big: list[tuple[str, dict[str, Any]]]

    @classmethod
    def build(cls) -> Workload:
        small_states = [chat_state(2_048, s) for s in range(SMALL // THREADS)]
        big_states = [chat_state(102_400, s) for s in range(BIG // THREADS)]
        small = [(f"thread-{n % THREADS}", small_states[n // THREADS]) for n in range(SMALL)]
        big = [(f"thread-{n % THREADS}", big_states[n // THREADS]) for n in range(BIG)]
        return cls(small, big)


class Subject:
    """One store under test, behind the five operations the benchmark times."""

    name = ""

    def prepare(self, items: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        raise NotImplementedError

    def put(self, prepared: Any) -> None:
        raise NotImplementedError

    def latest(self, thread: str) -> None:
        raise NotImplementedError

    def history(self, thread: str) -> int:
        raise NotImplementedError

    def add_write(self, thread: str) -> None:
        raise NotImplementedError

    def delete(self, thread: str) -> None:
        raise NotImplementedError


class Ours(Subject):
    """A durability store."""

    def __init__(self, store: durability.stores.Store) -> None:
        self.store = store

    def prepare(self, items: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        now = datetime.now(UTC)
        return [
            Checkpoint(
                thread_id=t,
                checkpoint_id=str(uuid.uuid4()),
                node_id="agent",
                step=n,
                state=s,
                created_at=now,
            )
            for n, (t, s) in enumerate(items)
        ]

    def put(self, prepared: Any) -> None:
        self.store.put(prepared)

    def latest(self, thread: str) -> None:
        assert self.store.latest(thread) is not None

    def history(self, thread: str) -> int:
        return len(self.store.history(thread))

    def add_write(self, thread: str) -> None:
        cp = self.store.latest(thread)
        assert cp is not None
        self.store.put_writes(
            [
                PendingWrite(
                    thread_id=thread,
                    checkpoint_id=cp.checkpoint_id,
                    task_id="task",
                    idx=0,
                    channel="messages",
                    value={"n": 1},
                )
            ]
        )

    def delete(self, thread: str) -> None:
        self.store.delete_thread(thread)


class Saver(Subject):
    """A LangGraph checkpoint saver, driven the way a graph run drives it."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def prepare(self, items: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        calls = []
        previous: dict[str, Previous] = {}
        for step, (thread, values) in enumerate(items):
            args, previous[thread] = put_args(
                self.saver, thread, previous.get(thread, (None, {})), values, step
            )
            calls.append(args)
        return calls

    def put(self, prepared: Any) -> None:
        self.saver.put(*prepared)

    def _config(self, thread: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

    def latest(self, thread: str) -> None:
        assert self.saver.get_tuple(self._config(thread)) is not None

    def history(self, thread: str) -> int:
        return len(list(self.saver.list(self._config(thread))))

    def add_write(self, thread: str) -> None:
        found = self.saver.get_tuple(self._config(thread))
        self.saver.put_writes(found.config, [("messages", {"n": 1})], "task")

    def delete(self, thread: str) -> None:
        self.saver.delete_thread(thread)


# ---------------------------------------------------------------------------- subjects


@dataclass
class Options:
    pg_url: str
    redis_url: str


def _pg_admin(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool
    )


@contextmanager
def ours(kind: str, options: Options, **store_options: Any) -> Iterator[Subject]:
    settings = Settings()
    if kind == "memory":
        with durability.open(f"memory://bench-{uuid.uuid4().hex}", settings=settings) as store:
            yield Ours(store)
    elif kind == "sqlite":
        with (
            tempfile.TemporaryDirectory() as tmp,
            durability.open(
                f"sqlite:///{tmp}/bench.db", settings=settings, **store_options
            ) as store,
        ):
            yield Ours(store)
    elif kind == "postgres":
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        try:
            with durability.open(options.pg_url, schema=schema, settings=settings) as store:
                yield Ours(store)
        finally:
            admin = _pg_admin(options.pg_url)
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            admin.dispose()
    elif kind == "redis":
        prefix = f"bench-{uuid.uuid4().hex[:10]}:"
        store = durability.open(options.redis_url, prefix=prefix, settings=settings)
        try:
            yield Ours(store)
            store.reset()
            store.client.delete(store.keys.format)  # type: ignore[attr-defined]
        finally:
            store.close()
    else:
        raise ValueError(kind)


@contextmanager
def theirs(kind: str, options: Options, synchronous: str | None = None) -> Iterator[Subject]:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield Saver(InMemorySaver())
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with tempfile.TemporaryDirectory() as tmp:
            conn = sqlite3.connect(f"{tmp}/saver.db", check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()
            if synchronous:
                conn.execute(f"PRAGMA synchronous = {synchronous}")
            yield Saver(saver)
            conn.close()
    elif kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        schema = f"lgbench_{uuid.uuid4().hex[:10]}"
        admin = _pg_admin(options.pg_url)
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        dsn = options.pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
        try:
            with PostgresSaver.from_conn_string(f"{dsn}?options=-csearch_path%3D{schema}") as saver:
                saver.setup()
                yield Saver(saver)
        finally:
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            admin.dispose()
    else:
        raise ValueError(kind)


# ---------------------------------------------------------------------------- timing


def _interleaved(
    subjects: list[Subject], calls: list[Callable[[int, Subject], Any]], chunk: int
) -> list[float]:
    """Seconds each subject spends on ``calls``, run ``chunk`` at a time, subject after subject.

    The subjects of a comparison take turns every few milliseconds, so a burst of load on the
    shared machine (another tenant's fsyncs) falls on all of them alike.
    """
    spent = [0.0] * len(subjects)
    for start in range(0, len(calls), chunk):
        part = calls[start : start + chunk]
        for i, subject in enumerate(subjects):
            began = time.perf_counter()
            for call in part:
                call(i, subject)
            spent[i] += time.perf_counter() - began
    return spent


def run_group(makes: list[Callable[[], Any]], work: Workload) -> list[dict[str, float]]:
    """ops/s of every operation, for every subject of a comparison, on fresh stores."""
    threads = [f"thread-{n}" for n in range(THREADS)]
    rates: list[dict[str, float]] = [{} for _ in makes]

    def record(op: str, n: int, spent: list[float]) -> None:
        for i, seconds in enumerate(spent):
            rates[i][op] = n / seconds

    with ExitStack() as stack:
        subjects = [stack.enter_context(make()) for make in makes]
        prepared = [s.prepare(work.small) for s in subjects]
        puts = [lambda i, s, n=n: s.put(prepared[i][n]) for n in range(SMALL)]
        record("put 2 KB", SMALL, _interleaved(subjects, puts, 250))
        reads = [lambda _i, s, t=t: s.latest(t) for t in threads * (SMALL_READS // THREADS)]
        record("latest 2 KB", SMALL_READS, _interleaved(subjects, reads, 50))
        lists = [lambda _i, s, n=n: s.history(threads[n % 5]) for n in range(LIST_CALLS)]
        record("history", LIST_CALLS * (SMALL // THREADS), _interleaved(subjects, lists, 2))
        for subject in subjects:
            for t in threads:
                subject.add_write(t)
        deletes = [lambda _i, s, t=t: s.delete(t) for t in threads]
        record("delete_thread", THREADS, _interleaved(subjects, deletes, 10))
    with ExitStack() as stack:
        subjects = [stack.enter_context(make()) for make in makes]
        prepared = [s.prepare(work.big) for s in subjects]
        puts = [lambda i, s, n=n: s.put(prepared[i][n]) for n in range(BIG)]
        record("put 100 KB", BIG, _interleaved(subjects, puts, 25))
        reads = [lambda _i, s, t=t: s.latest(t) for t in threads[:BIG_READS]]
        record("latest 100 KB", BIG_READS, _interleaved(subjects, reads, 10))
    return rates


def profile(make: Callable[[], Any], work: Workload, op: str) -> str:
    """The top functions by own time while ``make()``'s subject runs ``op``."""
    threads = [f"thread-{n}" for n in range(THREADS)]
    prof = cProfile.Profile()
    with make() as subject:
        data = work.big if "100 KB" in op else work.small
        prepared = subject.prepare(data)
        if op.startswith("put"):
            prof.runcall(lambda: [subject.put(p) for p in prepared])
        else:
            for p in prepared:
                subject.put(p)
            reads = threads * (SMALL_READS // THREADS) if "2 KB" in op else threads[:BIG_READS]
            prof.runcall(lambda: [subject.latest(t) for t in reads])
    return top_functions(prof, 10)


# ---------------------------------------------------------------------------- report


@dataclass
class Target:
    """A ratio the issue asks for: ``ours / peer >= ratio`` on ``op``."""

    op: str
    ours: str
    peer: str
    ratio: float
    #: What the profile of a miss shows (measured while building the store; see docs).
    why: str = ""


# Issues 14 and 15's targets, the stricter where both name one.
TARGETS = [
    Target(
        "put 2 KB",
        "durability sqlite (NORMAL, default)",
        "SqliteSaver (FULL, default)",
        3.0,
        "SqliteSaver waits for an fsync per put, durability's default does not; both then pay "
        "the SQLite write itself (see the FULL line).",
    ),
    Target(
        "put 2 KB",
        "durability sqlite (FULL)",
        "SqliteSaver (FULL, default)",
        1.0,
        "Both wait for one fsync of the WAL per put, and the fsync moves what the commit wrote. "
        "A durability put writes about 23 KB of WAL against SqliteSaver's 18 KB (schema 16, "
        "checkpoints held off): its row (seq is the rowid), the unique (thread, namespace, id) "
        "index that also serves LangGraph's order and the prefix search, and the thread-order "
        "index with the totals the sweep reads, against SqliteSaver's one primary-key index; "
        "the outbox row is no longer written by the put (decision 0150) but queued later in "
        "batches. Most of the time is SQLite committing; the rest is the put's Python "
        "(encoding six payloads, ids checks, the returned checkpoint).",
    ),
    Target(
        "put 2 KB",
        "durability sqlite (NORMAL, default)",
        "SqliteSaver (NORMAL)",
        1.2,
        "The same setting with no fsync on either side leaves the write itself: two indexes "
        "beside the row against SqliteSaver's one, and about 140 us of CPU a put against its "
        "76 us. Each index serves a promise SqliteSaver does not make (write-order `latest` "
        "with a per-thread seq that is never reused, a sweep that reads thread totals from an "
        "index, unique ids per thread and namespace with LangGraph's order); dropping either "
        "moves the cost to a read that must stay fast.",
    ),
    Target(
        "latest 2 KB",
        "durability sqlite (NORMAL, default)",
        "SqliteSaver (FULL, default)",
        1.2,
        "One prebuilt statement (decision 0180): an index descent on (tkey, seq), then the row, "
        "about 10 us of the call's 19 us of CPU (SqliteSaver runs two queries and unpacks one "
        "msgpack blob in C, ~22 us). The rest is decoding the codec texts (~3 us for 2 KB) and "
        "building the Checkpoint; 1.2x would leave ~5 us for all of the call's Python, which "
        "spends ~6. Wall-clock ratios beside three other stores on two cores swing 0.99x-1.13x.",
    ),
    Target(
        "put 2 KB",
        "durability postgres",
        "PostgresSaver",
        1.2,
        "Both are one commit per put and wait for its WAL flush (fsync on this shared virtual "
        "disk), which is most of the time in `wait`. durability writes about 1.0 KB of WAL per "
        "put against PostgresSaver's 4.3 KB (pg_wal_lsn_diff over 1,900 puts) and sends one "
        "prepared INSERT in one round trip (autocommit, no ping per call); a pair measured alone "
        "gave 1.27x. The flush time of the shared disk moves the ratio around the target.",
    ),
    Target("latest 2 KB", "durability postgres", "PostgresSaver", 1.2),
]

DURABILITY = """What a put survives, per subject: **SqliteSaver** runs SQLite's default `synchronous=FULL` in
WAL mode (its `setup()` sets WAL): a returned put survives a process kill and a power loss.
**durability sqlite** defaults to `synchronous=NORMAL` in WAL: a returned put survives a process
kill (tested by SIGKILL in `tests/test_crash.py`), while a power loss may roll back the last
commits; `synchronous="FULL"` gives SqliteSaver's guarantee, and is measured too. **Postgres**
(both): one commit per put, `fsync=on`, `synchronous_commit=on`. **Redis**: what the server is
configured for; the benchmark server runs with `--save "" --appendonly no`, so nothing survives
a Redis restart (`appendfsync everysec` would lose at most a second). **Memory** (both):
nothing outlives the process."""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", default="memory,sqlite,postgres,redis")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave RESULTS.md alone"
    )
    args = parser.parse_args()
    options = Options(args.pg_url, args.redis_url)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    subjects: dict[str, Callable[[], Any]] = {}
    groups: list[list[str]] = []
    if "memory" in backends:
        subjects["durability memory"] = lambda: ours("memory", options)
        subjects["InMemorySaver"] = lambda: theirs("memory", options)
        groups.append(["durability memory", "InMemorySaver"])
    if "sqlite" in backends:
        subjects["durability sqlite (NORMAL, default)"] = lambda: ours("sqlite", options)
        subjects["durability sqlite (FULL)"] = lambda: ours("sqlite", options, synchronous="FULL")
        subjects["SqliteSaver (FULL, default)"] = lambda: theirs("sqlite", options)
        subjects["SqliteSaver (NORMAL)"] = lambda: theirs("sqlite", options, synchronous="NORMAL")
        groups.append(list(subjects)[-4:])
    if "postgres" in backends:
        subjects["durability postgres"] = lambda: ours("postgres", options)
        subjects["PostgresSaver"] = lambda: theirs("postgres", options)
        groups.append(["durability postgres", "PostgresSaver"])
    if "redis" in backends:
        subjects["durability redis"] = lambda: ours("redis", options)
        groups.append(["durability redis"])
    work = Workload.build()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in subjects}
    for run in range(args.runs):
        for group in groups:
            for name, rates in zip(
                group, run_group([subjects[n] for n in group], work), strict=True
            ):
                results[name].append(rates)
            print(f"run {run + 1}: {', '.join(group)} done", file=sys.stderr)
    medians = {
        name: {op: statistics.median(r[op] for r in runs) for op in OPS}
        for name, runs in results.items()
    }

    lines = [
        HEADING,
        "",
        f"`python benchmarks/bench_stores.py --backends {','.join(backends)} --runs {args.runs}` — {date.today().isoformat()}, "
        f"Python {platform.python_version()}, durability {durability.__version__}, SQLite {sqlite3.sqlite_version}, "
        f"langgraph-checkpoint {version('langgraph-checkpoint')}, -sqlite {version('langgraph-checkpoint-sqlite')}, "
        f"-postgres {version('langgraph-checkpoint-postgres')}, SQLAlchemy {version('sqlalchemy')}, psycopg {version('psycopg')}, "
        f"redis-py {version('redis')}; {platform.machine()}, {_cores()} cores. Medians of {args.runs} interleaved runs, "
        "ops/s (history: checkpoints/s; delete_thread: threads of 50 checkpoints and a pending write, per second).",
        "",
    ]
    for group in groups:
        lines += ["| operation | " + " | ".join(group) + " |", "| --- |" + " ---: |" * len(group)]
        for op in OPS:
            lines.append(f"| {op} | " + " | ".join(f"{medians[n][op]:,.0f}" for n in group) + " |")
        lines.append("")
    if "postgres" in backends and "sqlite" in backends and "redis" in backends:
        same = ["durability sqlite (NORMAL, default)", "durability postgres", "durability redis"]
        lines += [
            "Redis beside Postgres and SQLite, same data:",
            "",
            "| operation | " + " | ".join(same) + " |",
            "| --- |" + " ---: |" * len(same),
        ]
        for op in OPS:
            lines.append(f"| {op} | " + " | ".join(f"{medians[n][op]:,.0f}" for n in same) + " |")
        lines.append("")
    lines += [
        "Targets:",
        "",
        "| target | ours | peer | ratio | wanted | |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    missed = []
    for t in TARGETS:
        if t.ours not in medians or t.peer not in medians:
            continue
        a, b = medians[t.ours][t.op], medians[t.peer][t.op]
        ok = a / b >= t.ratio
        lines.append(
            f"| {t.op}: {t.ours} / {t.peer} | {a:,.0f} | {b:,.0f} | {a / b:.2f}x | >= {t.ratio}x | {'met' if ok else '**missed**'} |"
        )
        if not ok:
            missed.append(t)
    lines += ["", DURABILITY, ""]
    for t in missed:
        lines += [
            f"**Missed: `{t.op}` of {t.ours} / {t.peer}.** {t.why}",
            "",
            "Profile (top functions by own time):",
            "",
            "```",
            profile(subjects[t.ours], work, t.op),
            "```",
            "",
        ]
    text = "\n".join(lines) + "\n"
    publish(HEADING, text, write=not args.no_write)


def _cores() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    main()
