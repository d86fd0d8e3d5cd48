"""Benchmark retention on LangGraph stores and copying between stores (issue 21), side by side.

Run with ``python benchmarks/bench_foreign.py [--threads 100000] [--peer-threads 2000]
[--copy-checkpoints 1000000] [--parts sweep-pg,sweep-sqlite,thin-pg,copy] [--no-write]``
(Postgres on loopback, ``--pg-url``; throw-away schemas ``fbench_*`` and files, removed after).

The data: a template of ``--template`` threads is written by the real ``PostgresSaver`` /
``SqliteSaver`` (``put`` and ``put_writes``: 5 checkpoints of about 400 bytes of chat state,
the ``messages`` channel growing every step, one pending write on the newest), then cloned
server-side (``INSERT … SELECT`` with new thread ids) to ``--threads`` threads, so every row is
in the saver's own format. Each subject gets a fresh clone. Timed:

* **sweep-pg**: durability's ``sweep`` of the ``langgraph+postgresql://…?writable=true`` store
  (its ``plan_sweep`` timed apart), LangGraph's ``delete_thread`` per thread (on
  ``--peer-threads`` threads of the full store, rate extrapolated), and LangGraph's
  ``prune(ids, strategy="delete")`` handed every id.
* **sweep-sqlite**: the same on SqliteSaver files (no prune there).
* **thin-pg**: durability's thinning to the latest checkpoint vs ``prune(ids, "keep_latest")``.
* **copy**: ``durability.copy`` of a durability SQLite store holding ``--copy-checkpoints``
  checkpoints (100 per thread) into a durability Postgres schema, checkpoints per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durability
from durability import Checkpoint
from durability.settings import Settings

HEADING = "## Foreign stores: sweep, thin and copy (issue 21)"
CHECKPOINTS = 5
SETTINGS = Settings(waiting_retention=timedelta(days=30))
BATCH = [2_000]
LATER = datetime.now(UTC) + timedelta(days=60)
PG_TABLES = ("checkpoint_migrations", "checkpoints", "checkpoint_blobs", "checkpoint_writes")


def chat_state(step: int) -> dict[str, Any]:
    messages = [
        {"role": "user" if n % 2 else "assistant", "content": f"message {n}: " + "lorem " * 6}
        for n in range(step + 1)
    ]
    return {"messages": messages, "step": step, "status": f"running-{step}"}


def write_template(saver: Any, count: int) -> None:
    """``count`` threads through the saver's own put / put_writes."""
    for n in range(count):
        config: dict[str, Any] = {"configurable": {"thread_id": f"t{n:05d}", "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        from langgraph.checkpoint.base import empty_checkpoint

        for step in range(CHECKPOINTS):
            values = chat_state(step)
            versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in values}
            cp = empty_checkpoint()
            cp["channel_values"] = values
            cp["channel_versions"] = dict(versions)
            cp["versions_seen"] = {"agent": dict(versions)}
            config = saver.put(config, cp, {"source": "loop", "step": step}, dict(versions))
        saver.put_writes(config, [("messages", {"n": 1})], "task-1")


# ---------------------------------------------------------------------------- Postgres


def pg_engine(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))


def pg_template(url: str, count: int) -> str:
    from langgraph.checkpoint.postgres import PostgresSaver

    schema = f"fbench_tpl_{uuid.uuid4().hex[:6]}"
    with pg_engine(url).begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    with PostgresSaver.from_conn_string(f"{url}?options=-csearch_path%3D{schema}") as saver:
        saver.setup()
        write_template(saver, count)
    return schema


def pg_clone(url: str, template: str, copies: int) -> str:
    """A fresh schema holding ``copies`` clones of every template thread."""
    schema = f"fbench_{uuid.uuid4().hex[:8]}"
    with pg_engine(url).begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        for t in PG_TABLES:
            conn.exec_driver_sql(
                f'CREATE TABLE "{schema}".{t} (LIKE "{template}".{t} INCLUDING ALL)'
            )
        conn.exec_driver_sql(
            f'INSERT INTO "{schema}".checkpoint_migrations SELECT * FROM "{template}".checkpoint_migrations'
        )
        for t in PG_TABLES[1:]:
            cols = [
                r[0]
                for r in conn.exec_driver_sql(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s ORDER BY ordinal_position",
                    (template, t),
                )
            ]
            select = ", ".join("thread_id || '-' || g" if c == "thread_id" else c for c in cols)
            conn.exec_driver_sql(
                f'INSERT INTO "{schema}".{t} ({", ".join(cols)}) SELECT {select} '
                f'FROM "{template}".{t}, generate_series(1, {copies}) AS g'
            )
    with pg_engine(url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'VACUUM ANALYZE "{schema}".checkpoints')
        conn.exec_driver_sql(f'VACUUM ANALYZE "{schema}".checkpoint_blobs')
        conn.exec_driver_sql(f'VACUUM ANALYZE "{schema}".checkpoint_writes')
    return schema


def pg_drop(url: str, *schemas: str) -> None:
    with pg_engine(url).begin() as conn:
        for s in schemas:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{s}_durability" CASCADE')


def pg_ids(url: str, schema: str) -> list[str]:
    with pg_engine(url).connect() as conn:
        return [
            r[0]
            for r in conn.exec_driver_sql(
                f'SELECT DISTINCT thread_id FROM "{schema}".checkpoints ORDER BY 1'
            )
        ]


@contextmanager
def pg_saver(url: str, schema: str) -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(f"{url}?options=-csearch_path%3D{schema}") as saver:
        yield saver


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def spread(ids: list[str], count: int) -> list[str]:
    step = max(1, len(ids) // count)
    return ids[::step][:count]


def durability_sweep(url: str) -> dict[str, float]:
    from durability.sweep import plan_sweep, sweep

    with durability.open(url, settings=SETTINGS) as store:
        plan_s, plan = timed(lambda: plan_sweep(store, now=LATER))
        sweep_s, result = timed(lambda: sweep(store, now=LATER, batch_size=BATCH[0]))
    threads = len(result.deleted_ids())
    assert threads == len(plan.deletes()), (threads, len(plan.deletes()))
    return {"plan_s": plan_s, "sweep_s": sweep_s, "threads": threads, "rounds": result.rounds}


@contextmanager
def pg_templated(args: argparse.Namespace) -> Iterator[tuple[str, str, int]]:
    """The Postgres URL, a template schema of ``args.template`` threads and how many copies of
    it make ``args.threads``; the template is dropped afterwards."""
    url, copies = args.pg_url, args.threads // args.template
    template = pg_template(url, args.template)
    try:
        yield url, template, copies
    finally:
        pg_drop(url, template)


@contextmanager
def pg_cloned(url: str, template: str, copies: int) -> Iterator[str]:
    """A fresh schema of ``copies`` clones of the template (:func:`pg_clone`), dropped afterwards."""
    s = pg_clone(url, template, copies)
    try:
        yield s
    finally:
        pg_drop(url, s)


def _timed_prune(url: str, template: str, copies: int, strategy: str) -> dict[str, Any]:
    """LangGraph's own ``prune(ids, strategy)`` of every thread, on a fresh clone of the template."""
    with pg_cloned(url, template, copies) as s:
        ids = pg_ids(url, s)
        with pg_saver(url, s) as saver:
            secs, _ = timed(lambda: saver.prune(ids, strategy=strategy))
        return {"threads": len(ids), "s": secs}


def sweep_pg(args: argparse.Namespace) -> dict[str, Any]:
    with pg_templated(args) as (url, template, copies):
        out: dict[str, Any] = {"threads": copies * args.template}
        with pg_cloned(url, template, copies) as s:
            out["durability"] = durability_sweep(f"langgraph+{url}?schema={s}&writable=true")
        with pg_cloned(url, template, copies) as s:
            ids = pg_ids(url, s)
            sample = spread(ids, args.peer_threads)
            with pg_saver(url, s) as saver:
                secs, _ = timed(lambda: [saver.delete_thread(t) for t in sample])
            out["delete_thread"] = {"threads": len(sample), "s": secs}
        out["prune_delete"] = _timed_prune(url, template, copies, "delete")
        return out


def thin_pg(args: argparse.Namespace) -> dict[str, Any]:
    """Thinning every thread to its latest checkpoint beside prune(ids, "keep_latest")."""
    from durability.sweep.thin import plan_thin, thin

    with pg_templated(args) as (url, template, copies):
        out: dict[str, Any] = {"threads": copies * args.template}
        with pg_cloned(url, template, copies) as s:
            store_url = f"langgraph+{url}?schema={s}&writable=true"
            with durability.open(store_url, settings=SETTINGS) as store:
                plan_s, _ = timed(lambda: plan_thin(store, keep_latest=1))
                thin_s, result = timed(lambda: thin(store, keep_latest=1))
            out["durability"] = {
                "plan_s": plan_s,
                "thin_s": thin_s,
                "dropped": result.checkpoints,
            }
        out["prune_keep_latest"] = _timed_prune(url, template, copies, "keep_latest")
        return out


# ---------------------------------------------------------------------------- SQLite


def sqlite_template(path: Path, count: int) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    write_template(saver, count)
    saver.conn.close()


def sqlite_clone(template: Path, target: Path, copies: int) -> None:
    shutil.copy(template, target)
    conn = sqlite3.connect(target)
    with conn:
        for table in ("checkpoints", "writes"):
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            select = ", ".join(
                "t.thread_id || '-' || g.gn" if c == "thread_id" else f"t.{c}" for c in cols
            )
            conn.execute(
                f"WITH RECURSIVE g(gn) AS (SELECT 1 UNION ALL SELECT gn + 1 FROM g "
                f"WHERE gn < {copies}) INSERT INTO {table} ({', '.join(cols)}) "
                f"SELECT {select} FROM {table} AS t, g WHERE t.thread_id NOT LIKE '%-%'"
            )
            conn.execute(f"DELETE FROM {table} WHERE thread_id NOT LIKE '%-%'")
    conn.execute("VACUUM")
    conn.close()


def sweep_sqlite(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    copies = args.threads // args.template
    template = work / "template.db"
    sqlite_template(template, args.template)
    out: dict[str, Any] = {"threads": copies * args.template}
    a = work / "a.db"
    sqlite_clone(template, a, copies)
    out["durability"] = durability_sweep(f"langgraph+sqlite:///{a}?writable=true")
    b = work / "b.db"
    sqlite_clone(template, b, copies)
    conn = sqlite3.connect(b, check_same_thread=False)
    ids = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1")]
    saver = SqliteSaver(conn)
    sample = spread(ids, args.peer_threads)
    secs, _ = timed(lambda: [saver.delete_thread(t) for t in sample])
    out["delete_thread"] = {"threads": len(sample), "s": secs}
    conn.close()
    return out


# ---------------------------------------------------------------------------- copy


def copy_bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    per_thread = 100
    threads = args.copy_checkpoints // per_thread
    src = f"sqlite:///{work / 'copy-src.db'}"
    state = chat_state(2)
    with durability.open(src) as store:
        for start in range(0, threads, 20):
            store.put_many(
                [
                    Checkpoint(
                        thread_id=f"c{t:06d}",
                        checkpoint_id=f"c{t:06d}-{i:03d}",
                        node_id="agent",
                        step=i,
                        state=state,
                    )
                    for t in range(start, min(threads, start + 20))
                    for i in range(per_thread)
                ],
                synced=True,
            )
    schema = f"fbench_copy_{uuid.uuid4().hex[:6]}"
    dst = f"{args.pg_url.replace('postgresql://', 'postgresql+psycopg://')}?schema={schema}"
    try:
        secs, result = timed(lambda: durability.copy(src, dst, chunk_size=5000))
    finally:
        pg_drop(args.pg_url, schema)
    return {"checkpoints": result.checkpoints, "s": secs, "per_s": result.checkpoints / secs}


# ---------------------------------------------------------------------------- report


def _load(r: dict[str, Any]) -> str:
    load = r.get("load")
    return "load average not recorded" if load is None else f"load average {load:.1f} at the start"


def _rate(n: float, s: float) -> str:
    return f"{n / s:,.0f}"


def report(r: dict[str, Any]) -> str:
    """The RESULTS.md section for these figures."""
    lines = [
        HEADING,
        "",
        f"`python benchmarks/bench_foreign.py {' '.join(r.get('command', []))}` — {r['date']}, "
        f"Python {r['python']}, SQLite {r['sqlite']}, langgraph-checkpoint "
        f"{r['langgraph-checkpoint']} (-sqlite {r.get('langgraph-checkpoint-sqlite', '?')}, "
        f"-postgres {r.get('langgraph-checkpoint-postgres', '?')}); 2 cores shared with other "
        f"helpers' test runs ({_load(r)}): read the ratios. One run per figure (no medians: the "
        "session's time allowed one).",
        "",
        "Data: a template of threads written by the real `PostgresSaver` / `SqliteSaver` "
        "(`put`, `put_writes`: 5 checkpoints of ~400 B of chat state and one pending write per "
        "thread), cloned server-side to the thread count, every thread due on the waiting "
        "horizon. Each subject gets a fresh clone.",
        "",
        "| what | durability | peer | ratio | wanted | |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    pg = r.get("sweep-pg")
    if pg:
        d, n = pg["durability"], pg["threads"]
        delete_s = d["sweep_s"] - d["plan_s"]
        per = pg["delete_thread"]["threads"] / pg["delete_thread"]["s"]
        ratio = (n / d["sweep_s"]) / per
        lines.append(
            f"| Postgres sweep of {n:,} threads, plan included, threads/s vs `delete_thread` "
            f"per thread | {_rate(n, d['sweep_s'])} | {per:,.0f} | {ratio:.1f}x | >= 10x | "
            f"{'met' if ratio >= 10 else '**missed**'} |"
        )
        prune = pg["prune_delete"]["s"]
        ratio = prune / delete_s
        lines.append(
            f"| Postgres sweep's deletes (its plan, {d['plan_s']:.1f} s, apart) vs "
            f'`prune(ids, "delete")`, seconds | {delete_s:.1f} | {prune:.1f} | {ratio:.2f}x | '
            f">= 1x | {'met' if ratio >= 1 else '**missed**'} |"
        )
    lite = r.get("sweep-sqlite")
    if lite:
        d, n = lite["durability"], lite["threads"]
        per = lite["delete_thread"]["threads"] / lite["delete_thread"]["s"]
        ratio = (n / d["sweep_s"]) / per
        lines.append(
            f"| SQLite sweep of {n:,} threads, plan included, threads/s vs `delete_thread` "
            f"per thread | {_rate(n, d['sweep_s'])} | {per:,.0f} | {ratio:.1f}x | recorded | |"
        )
    thin = r.get("thin-pg")
    if thin:
        d = thin["durability"]
        prune = thin["prune_keep_latest"]["s"]
        ratio = prune / d["thin_s"]
        lines.append(
            f"| Postgres thinning of {thin['threads']:,} threads to the latest checkpoint "
            f'(plan included) vs `prune(ids, "keep_latest")`, seconds | {d["thin_s"]:.1f} | '
            f"{prune:.1f} | {ratio:.2f}x | >= 1x | {'met' if ratio >= 1 else '**missed**'} |"
        )
    copy = r.get("copy")
    if copy:
        lines.append(
            f"| copy of {copy['checkpoints']:,} checkpoints, durability SQLite → Postgres, "
            f"checkpoints/s | {copy['per_s']:,.0f} | | | >= 20,000 | "
            f"{'met' if copy['per_s'] >= 20_000 else '**missed**'} |"
        )
    lines += [
        "",
        "Raw figures (seconds):",
        "",
        "```",
        json.dumps(
            {k: r[k] for k in ("sweep-pg", "sweep-sqlite", "thin-pg", "copy") if k in r}, indent=1
        ),
        "```",
        "",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--template", type=int, default=500)
    parser.add_argument("--peer-threads", type=int, default=2_000)
    parser.add_argument("--copy-checkpoints", type=int, default=1_000_000)
    parser.add_argument("--parts", default="sweep-pg,sweep-sqlite,copy")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--batch", type=int, default=2_000, help="Threads per sweep batch.")
    parser.add_argument("--out", default=None, help="Write the figures as JSON here.")
    parser.add_argument(
        "--report",
        nargs="+",
        default=None,
        help="Write the RESULTS.md section from these JSON files (later files win per part).",
    )
    args = parser.parse_args()
    if args.report:
        merged: dict[str, Any] = {}
        for name in args.report:
            merged.update(json.loads(Path(name).read_text()))
        from _results import write_section

        write_section(HEADING, report(merged))
        return
    results: dict[str, Any] = {
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "langgraph-checkpoint": version("langgraph-checkpoint"),
        "langgraph-checkpoint-sqlite": version("langgraph-checkpoint-sqlite"),
        "langgraph-checkpoint-postgres": version("langgraph-checkpoint-postgres"),
        "command": sys.argv[1:],
        "load": os.getloadavg()[0],
        "args": vars(args),
    }
    BATCH[0] = args.batch
    with tempfile.TemporaryDirectory(prefix="fbench-") as tmp:
        work = Path(tmp)
        for part in args.parts.split(","):
            started = time.perf_counter()
            if part == "sweep-pg":
                results[part] = sweep_pg(args)
            elif part == "sweep-sqlite":
                results[part] = sweep_sqlite(args, work)
            elif part == "thin-pg":
                results[part] = thin_pg(args)
            elif part == "copy":
                results[part] = copy_bench(args, work)
            print(f"{part}: {time.perf_counter() - started:.0f}s", file=sys.stderr)
            print(json.dumps(results[part], indent=1), file=sys.stderr)
    results["load_end"] = os.getloadavg()[0]
    text = json.dumps(results, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
