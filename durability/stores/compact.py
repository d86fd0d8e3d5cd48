"""Giving the disk back: ``durability store compact URL``.

A delete (the sweep, thinning) makes space reusable inside the database; it does not shrink a
SQLite file or return Postgres pages to the system. Compacting is its own step:

* **SQLite** (durability's or a LangGraph file opened ``?writable=true``): ``VACUUM`` rewrites
  the file, which needs exclusive access — with another connection writing it fails at once
  (no waiting) and says to stop the writers; then the WAL is truncated.
* **Postgres**: plain ``VACUUM (ANALYZE)`` of the store's tables runs online beside writers: it
  makes dead rows' space reusable and returns only empty pages at a table's end to the system.
  ``VACUUM FULL`` (or ``pg_repack``) returns everything but locks each table exclusively while
  it rewrites it, so it is left to a maintenance window; the result says so.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from durability._util import redact_url
from durability.errors import CapabilityError, StoreError
from durability.stores.base import Store


@dataclass(frozen=True, slots=True)
class Compacted:
    """What compacting did: bytes before and after, and what it could not do online."""

    url: str
    before: int
    after: int
    note: str


def compact(store: Store) -> Compacted:
    """Compact ``store`` (see the module); refuses a store it cannot compact, naming why."""
    path, engine, tables = _target(store)
    if path is not None:
        before = _file_size(path)
        try:
            conn = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"cannot compact {redact_url(store.url)}: VACUUM needs exclusive access to the "
                f"file and another connection holds it ({exc}); stop the processes writing to "
                "it, then compact again (nothing was changed)"
            ) from exc
        note = "rewrote the file with VACUUM (exclusive access)"
        return Compacted(redact_url(store.url), before, _file_size(path), note)
    assert engine is not None
    size = "SELECT coalesce(sum(pg_total_relation_size(CAST(:t AS regclass))), 0)"
    with engine.connect() as conn:
        before = sum(int(conn.execute(sa.text(size), {"t": t}).scalar() or 0) for t in tables)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for t in tables:
            conn.exec_driver_sql(f"VACUUM (ANALYZE) {t}")
        after = sum(int(conn.execute(sa.text(size), {"t": t}).scalar() or 0) for t in tables)
    note = (
        "ran VACUUM (ANALYZE) online: dead rows' space is reusable and empty trailing pages went "
        "back to the system; VACUUM FULL (or pg_repack) returns the rest but locks each table "
        "exclusively while it rewrites it — run it in a maintenance window"
    )
    return Compacted(redact_url(store.url), before, after, note)


def _target(store: Store) -> tuple[Path | None, Any, list[str]]:
    """The SQLite file, or the Postgres engine and the quoted tables, to compact."""
    from durability.stores.foreign.langgraph import LangGraphStore
    from durability.stores.sql import SQLStore

    if isinstance(store, LangGraphStore):
        if not store.writable:
            raise store.refuse("compact the store")
        if store.dialect == "sqlite":
            return store.path, None, []
        names = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        return None, store.engine, [store.table(n) for n in names]
    if isinstance(store, SQLStore):
        engine = store.db.engine
        if store.provider == "sqlite":  # not set up first: that would wait on the writer
            return Path(engine.url.database or ""), None, []
        store.ready()
        schema = store.options.schema
        with engine.connect() as conn:
            found = conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                    "coalesce(:s, current_schema()) AND table_type = 'BASE TABLE'"
                ),
                {"s": schema},
            ).scalars()
            return None, engine, [store.db.table(n) for n in found]
    raise CapabilityError(
        f"cannot compact {redact_url(store.url)}: only SQLite and Postgres stores are compacted "
        f"(a {store.provider} store frees its space as it deletes)"
    )


def _file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
