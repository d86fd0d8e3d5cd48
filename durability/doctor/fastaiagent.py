"""Checks of a fastaiagent store's own invariants, and of the rows its SDK's known bugs leave.

A fastaiagent store is read in place and read-only, so every check here reports and none
repairs; each names what the SDK will do with the rows (see the fastaiagent reference,
"Surprises, bugs and edge cases"):

* a run end the plane refused (quarantined): the plane's latest row is then an earlier step,
  and a restore on another machine runs a finished execution again;
* idempotency-cache rows of an execution that holds no checkpoint (``delete_execution`` clears
  the three tables in three statements on SQLite; ``prune`` cuts checkpoints and cache rows
  apart);
* (SQLite) an unsent row holding ``NaN`` or ``Infinity``: the SDK writes it, its drain can never
  encode it, and as the oldest unsent row it stalls every later row of the project;
* (SQLite) an unsent legacy row without ``checkpoint_id``: the SDK marks rows synced by that
  column, so it sends the row again on every drain (200 of them make the drain spin);
* (SQLite) rows of one execution whose ``created_at`` texts sort differently from their times
  (``Z`` beside ``+00:00``, a missing fraction): the SDK compares them as text, so its
  ``get_last`` and ``prune`` order them wrongly.

Postgres keeps no ``NaN`` in ``jsonb``, requires ``checkpoint_id`` and stores times as
``timestamptz``, so the last three cannot happen there.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from durability.doctor.model import Check, Context, named
from durability.stores.foreign.base import parse_time

Finding = tuple[str | None, list[Any], str]

#: The JSON columns a row's payload lives in (where ``NaN`` can hide).
JSON_COLUMNS = ("state_snapshot", "node_input", "node_output", "iteration_counters")


def _rows(ctx: Context, action: str, sql: str) -> list[Any]:
    with ctx.store.read(action) as conn:  # type: ignore[attr-defined]
        return list(conn.execute(sa.text(sql)))


def _columns(ctx: Context, table: str) -> set[str]:
    """The columns of a SQLite table (older ``local.db`` files lack some)."""
    return {r[1] for r in _rows(ctx, "read the fastaiagent schema", f"PRAGMA table_info({table})")}


def _run_end_quarantined(ctx: Context) -> Iterator[Finding]:
    table = ctx.store.table("checkpoints")  # type: ignore[attr-defined]
    sql = (
        f"SELECT execution_id, checkpoint_id, sync_error FROM {table} "  # noqa: S608 - quoted identifier
        "WHERE step_type = 'run_end' AND sync_error IS NOT NULL ORDER BY execution_id"
    )
    for execution_id, checkpoint_id, reason in _rows(ctx, "find quarantined run ends", sql):
        yield (
            execution_id,
            [checkpoint_id],
            f"the plane refused its run end {checkpoint_id!r} ({str(reason)[:120]}): the plane's "
            "latest row is an earlier step, so a restore on another machine runs the finished "
            "execution again",
        )


def _idempotency_orphans(ctx: Context) -> Iterator[Finding]:
    store: Any = ctx.store
    cache, checkpoints = store.table("idempotency_cache"), store.table("checkpoints")
    with store.read("look for the idempotency cache") as conn:
        if not sa.inspect(conn).has_table("idempotency_cache", schema=store.schema):
            return
    sql = (
        f"SELECT i.execution_id, i.function_key, i.created_at FROM {cache} i WHERE NOT EXISTS "  # noqa: S608
        f"(SELECT 1 FROM {checkpoints} c WHERE c.execution_id = i.execution_id) "
        "ORDER BY i.execution_id"
    )
    found: dict[str, list[str]] = defaultdict(list)
    for execution_id, key, created_at in _rows(ctx, "find idempotency rows", sql):
        at = parse_time(created_at)
        if at is not None and ctx.now - at < ctx.grace:  # a run's first step, before its row
            continue
        found[execution_id].append(key)
    for execution_id, keys in found.items():
        yield (
            execution_id,
            keys,
            f"{len(keys)} idempotency-cache rows of an execution that holds no checkpoint "
            f"(functions {named(keys)}): nothing reads them again",
        )


def _unsendable(ctx: Context) -> Iterator[Finding]:
    present = _columns(ctx, "checkpoints")
    columns = [c for c in JSON_COLUMNS if c in present]
    if "synced" not in present or not columns:
        return
    suspect = " OR ".join(f"{c} LIKE '%{token}%'" for c in columns for token in ("NaN", "Infinity"))
    sql = (
        f"SELECT execution_id, {_checkpoint_id(present)}, {', '.join(columns)} "  # noqa: S608
        f"FROM checkpoints WHERE synced = 0 AND ({suspect}) ORDER BY rowid"
    )
    found: dict[str, list[str]] = defaultdict(list)
    for execution_id, checkpoint_id, *texts in _rows(ctx, "find unsendable rows", sql):
        if any(_non_finite(text) for text in texts):
            found[execution_id].append(checkpoint_id)
    for execution_id, ids in found.items():
        yield (
            execution_id,
            ids,
            f"{len(ids)} unsent rows holding NaN or Infinity ({named(ids)}): the SDK's drain "
            "cannot encode them, and the oldest unsent row stalls every later row of its project",
        )


def _non_finite(text: str | None) -> bool:
    """Whether a stored JSON text holds ``NaN``, ``Infinity`` or ``-Infinity`` as a number."""
    seen: list[str] = []

    def constant(name: str) -> float:
        seen.append(name)
        return 0.0

    try:
        json.loads(text or "{}", parse_constant=constant)
    except ValueError:
        return False  # not JSON at all: the SDK sends {} for it (another story)
    return bool(seen)


def _checkpoint_id(present: set[str]) -> str:
    return "coalesce(checkpoint_id, id)" if "checkpoint_id" in present else "id"


def _resent_forever(ctx: Context) -> Iterator[Finding]:
    present = _columns(ctx, "checkpoints")
    if not {"synced", "checkpoint_id"} <= present:
        return
    sql = (
        "SELECT execution_id, id FROM checkpoints WHERE checkpoint_id IS NULL AND synced = 0 "
        "ORDER BY rowid"
    )
    found: dict[str, list[str]] = defaultdict(list)
    for execution_id, row_id in _rows(ctx, "find legacy rows without a checkpoint id", sql):
        found[execution_id].append(row_id)
    for execution_id, ids in found.items():
        yield (
            execution_id,
            ids,
            f"{len(ids)} unsent legacy rows without a checkpoint_id ({named(ids)}): the SDK marks "
            "rows synced by checkpoint_id, so it sends these again on every drain",
        )


def _misordered(ctx: Context) -> Iterator[Finding]:
    sql = "SELECT execution_id, created_at FROM checkpoints ORDER BY execution_id, created_at"
    by_execution: dict[str, list[str]] = defaultdict(list)
    for execution_id, created_at in _rows(ctx, "read the checkpoints' times", sql):
        if created_at:
            by_execution[execution_id].append(created_at)
    for execution_id, texts in by_execution.items():
        times = [parse_time(t) for t in texts]
        pairs = [  # neighbours in text order whose times run backwards
            (texts[i - 1], texts[i])
            for i in range(1, len(texts))
            if (earlier := times[i - 1]) is not None
            and (later := times[i]) is not None
            and earlier > later
        ]
        if pairs:
            shown = [f"{a} before {b}" for a, b in pairs]
            yield (
                execution_id,
                [b for _a, b in pairs],
                f"created_at texts that sort against their times ({named(shown)}): the SDK "
                "compares them as text, so its get_last and prune order these rows wrongly",
            )


def _fastaiagent(ctx: Context) -> bool:
    return getattr(ctx.store, "source", "") == "fastaiagent"


def _fastaiagent_sqlite(ctx: Context) -> bool:
    return _fastaiagent(ctx) and getattr(ctx.store, "dialect", "") == "sqlite"


def _check(name: str, severity: str, summary: str, run: Any, *, sqlite: bool = False) -> Check:
    return Check(
        name,
        severity,
        summary,
        run,
        applies=_fastaiagent_sqlite if sqlite else _fastaiagent,
        unless="not a fastaiagent SQLite store" if sqlite else "not a fastaiagent store",
    )


CHECKS = (
    _check(
        "fastaiagent_run_end_quarantined",
        "warning",
        "a fastaiagent run end the plane refused: a restore elsewhere runs the execution again",
        _run_end_quarantined,
    ),
    _check(
        "fastaiagent_idempotency_without_execution",
        "warning",
        "fastaiagent idempotency-cache rows of an execution that holds no checkpoint",
        _idempotency_orphans,
    ),
    _check(
        "fastaiagent_outbox_stalled",
        "error",
        "an unsent fastaiagent row holding NaN or Infinity, which the SDK can never send",
        _unsendable,
        sqlite=True,
    ),
    _check(
        "fastaiagent_resent_forever",
        "warning",
        "an unsent legacy fastaiagent row without checkpoint_id, which the SDK re-sends forever",
        _resent_forever,
        sqlite=True,
    ),
    _check(
        "fastaiagent_created_at_misordered",
        "warning",
        "fastaiagent rows whose created_at texts sort against their times (SQLite compares text)",
        _misordered,
        sqlite=True,
    ),
)
