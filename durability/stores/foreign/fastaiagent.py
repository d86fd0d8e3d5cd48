"""A fastaiagent checkpoint store, read in place: ``fastaiagent+sqlite:///.fastaiagent/local.db``
or ``fastaiagent+postgresql://user@host/db?schema=fastaiagent``.

The fastaiagent SDK keeps one row per checkpoint in ``checkpoints`` and one pending
human-in-the-loop pause per execution in ``pending_interrupts``. Mapping onto the model:

===========================  ===============================================================
durability                   fastaiagent
===========================  ===============================================================
thread (and run)             ``execution_id``: a fastaiagent execution is a thread of one run
``checkpoint_id``            ``checkpoint_id`` (``id`` on legacy rows where it is NULL)
``runner``                   ``chain_name``
``step``                     ``node_index``
``node_id``, ``step_type``,  the columns of the same name; a NULL ``step_type`` (rows written
``status``, ``agent_path``   before schema v20) means "not a run end", NULL status ``completed``
``state``, ``node_input``,   the JSON columns, parsed (NULL or empty: ``{}``); a column whose
``node_output``, …           text is not JSON comes back ``{}`` and is named in
                             ``metadata["unreadable"]`` (the SDK would silently send ``{}``)
``seq``                      SQLite: the ``rowid`` (write order; the SDK's own ``get_last``
                             orders by ``created_at`` first). Postgres has no write order, so
                             ``seq`` ranks rows by ``created_at`` then ``checkpoint_id``
``size_bytes``               the bytes of the JSON columns as stored
``project_id``               SQLite's ``project_id``; ``""`` on Postgres (it has none)
park                         a ``pending_interrupts`` row: reason, context, the interrupted
                             checkpoint; the SDK records no deadline, so ``deadline`` is its
                             ``created_at`` plus the waiting retention and ``deadline_source``
                             is ``"horizon"``
outbox entry                 ``synced`` and ``sync_error``: pending (``synced = 0``), synced,
                             or quarantined (``synced = 1`` with the plane's explanation in
                             ``sync_error``); ``attempts`` is 0 (the SDK keeps no count)
===========================  ===============================================================

A run end is the row with ``step_type = "run_end"`` (its ``state`` carries ``run_status``,
``run_error``, ``run_reason``). fastaiagent keeps no ledger, so thread records have no owner,
declared retention or finished mark.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import astuple
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability.clock import from_micros, to_micros
from durability.model import COMPLETED, Checkpoint, OutboxEntry, Park, ThreadRecord
from durability.stores.base import ThreadPage
from durability.stores.foreign.base import (
    ForeignOutbox,
    ForeignParks,
    ForeignStore,
    Row,
    WrittenRow,
    parse_time,
)
from durability.stores.outbox import EntryQuery
from durability.stores.rows import CheckpointAddress, CheckpointKey, Select
from durability.stores.scans import (
    CHECKPOINT_COLUMNS,
    THREAD_COLUMNS,
    Columns,
    Scans,
    column_chunks,
    thread_row,
)

_JSON_FIELDS = (
    "state_snapshot",
    "node_input",
    "node_output",
    "iteration_counters",
    "interrupt_context",
)
#: Columns read from ``checkpoints`` (older SQLite files lack some; those read as NULL).
_COLUMNS = (
    "execution_id",
    "chain_name",
    "node_id",
    "node_index",
    "status",
    "iteration",
    "interrupt_reason",
    "agent_path",
    "created_at",
    "parent_checkpoint_id",
    "synced",
    "sync_error",
    "step_type",
    *_JSON_FIELDS,
)


class FastAIAgentStore(ForeignStore):
    """A fastaiagent SQLite ``local.db`` or Postgres schema, read-only."""

    source = "fastaiagent"
    default_schema = "fastaiagent"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.parks = FastAIAgentParks(self)
        self.outbox = FastAIAgentOutbox(self)
        self.scans = FastAIAgentScans(self)

    # ------------------------------------------------------------------ the row query

    def _setup(self) -> None:
        with self.read("read the fastaiagent schema") as conn:
            self.require_tables(conn, "checkpoints", "pending_interrupts")
            self._base = self._base_query(conn)

    def _base_query(self, conn: SAConnection) -> str:
        """One SELECT giving every checkpoint with normalised columns, ``seq`` and ``size_bytes``."""
        table = self.table("checkpoints")
        if self.dialect == "sqlite":
            present = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(checkpoints)")}
            cols = [c if c in present else f"NULL AS {c}" for c in _COLUMNS]
            checkpoint_id = (
                "coalesce(checkpoint_id, id)" if "checkpoint_id" in present else "id"
            ) + " AS checkpoint_id"
            project = "project_id" if "project_id" in present else "'' AS project_id"
            size = " + ".join(
                f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in _JSON_FIELDS if c in present
            )
            return (
                f"SELECT rowid AS seq, {checkpoint_id}, {project}, {', '.join(cols)}, "  # noqa: S608
                f"({size}) AS size_bytes FROM {table}"
            )
        size = " + ".join(f"coalesce(octet_length({c}::text), 0)" for c in _JSON_FIELDS)
        return (
            "SELECT row_number() OVER (ORDER BY created_at, checkpoint_id) AS seq, checkpoint_id, "  # noqa: S608
            f"'' AS project_id, {', '.join(_COLUMNS)}, ({size}) AS size_bytes FROM {table}"
        )

    def query(
        self, where: str = "", order: str = "seq", limit: int | None = None, **params: Any
    ) -> list[Any]:
        """Checkpoint rows of the normalised query, filtered and ordered in SQL."""
        self.ready()
        sql = f"SELECT * FROM ({self._base}) AS c" + (f" WHERE {where}" if where else "")  # noqa: S608
        sql += f" ORDER BY {order}" + (" LIMIT :limit" if limit is not None else "")
        if limit is not None:
            params["limit"] = limit
        with self.read("read checkpoints") as conn:
            return list(conn.execute(sa.text(sql), params))

    # ------------------------------------------------------------------ the contract's reads

    def _has_any_checkpoint(self) -> bool:
        return bool(self.query(limit=1))

    def _select(self, query: Select) -> list[Row]:
        clause = self.select_clause(query, thread="execution_id", namespace=None)
        if clause is None:
            return []
        where, params, order = clause
        return [_row(r) for r in self.query(where, order, query.limit, **params)]

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[WrittenRow]]:
        return {}  # fastaiagent keeps no pending writes (its put_writes is a no-op)

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        where = "execution_id > :cursor" if cursor is not None else ""
        records = self._records(where, limit, cursor=cursor)
        return ThreadPage(records, records[-1].thread_id if len(records) == limit else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        records = self._records("execution_id = :t", 1, t=thread_id)
        return records[0] if records else None

    def _records(self, where: str, limit: int, **params: Any) -> list[ThreadRecord]:
        self.ready()
        sql = (
            "SELECT execution_id, count(*) AS n, sum(size_bytes) AS size, max(created_at) AS "  # noqa: S608
            f"newest_at, max(seq) AS newest_seq FROM ({self._base}) AS c"
            + (f" WHERE {where}" if where else "")
            + " GROUP BY execution_id ORDER BY execution_id LIMIT :limit"
        )
        with self.read("list threads") as conn:
            rows = conn.execute(sa.text(sql), {**params, "limit": limit})
            return [
                ThreadRecord(
                    thread_id=r.execution_id,
                    run_id=r.execution_id,
                    checkpoints=int(r.n),
                    size_bytes=int(r.size or 0),
                    newest_at=parse_time(r.newest_at),
                    newest_seq=int(r.newest_seq),
                )
                for r in rows
            ]

    def scalar_rows(self, thread_id: str | None) -> list[Any]:
        """Every checkpoint's scalar columns by thread and write order; the JSON is never parsed."""
        self.ready()
        sql = (
            "SELECT execution_id, checkpoint_id, seq, node_id, node_index, step_type, status, "  # noqa: S608
            f"created_at, size_bytes, synced, sync_error, chain_name FROM ({self._base}) AS c"
            + (" WHERE execution_id = :t" if thread_id is not None else "")
            + " ORDER BY execution_id, seq"
        )
        with self.read("read checkpoint columns") as conn:
            return list(conn.execute(sa.text(sql), {"t": thread_id}))


class FastAIAgentParks(ForeignParks):
    """A ``pending_interrupts`` row is a park: the SDK records no deadline, so it is the pause's
    time plus the waiting retention (``deadline_source="horizon"``)."""

    store: FastAIAgentStore

    def _pending(self) -> list[Park]:
        return self._read("")

    def _get(self, thread_id: str) -> Park | None:
        parks = self._read("WHERE p.execution_id = :t", t=thread_id)
        return parks[0] if parks else None

    def _read(self, where: str, **params: Any) -> list[Park]:
        store = self.store
        store.ready()
        # The interrupted checkpoint the pause belongs to: the execution's last one.
        sql = (
            "SELECT p.execution_id, p.chain_name, p.node_id, p.reason, p.context, p.created_at, "  # noqa: S608
            f"(SELECT c.checkpoint_id FROM ({store._base}) AS c WHERE c.execution_id = p.execution_id "
            "AND c.status = 'interrupted' ORDER BY c.seq DESC LIMIT 1) AS checkpoint_id "
            f"FROM {store.table('pending_interrupts')} AS p {where}"
        )
        waiting = store.settings.waiting_retention
        with store.read("list parks") as conn:
            parks = []
            for r in conn.execute(sa.text(sql), params):
                created = parse_time(r.created_at)
                parks.append(
                    Park(
                        thread_id=r.execution_id,
                        run_id=r.execution_id,
                        checkpoint_id=r.checkpoint_id or "",
                        node_id=r.node_id,
                        runner=r.chain_name,
                        reason=r.reason,
                        context=_json(r.context)[0],
                        created_at=created,
                        deadline=(created or store.clock()) + waiting,
                        deadline_source="horizon",
                    )
                )
            return parks


class FastAIAgentOutbox(ForeignOutbox):
    """The SDK's ``synced`` and ``sync_error`` columns as outbox entries (attempts: 0)."""

    store: FastAIAgentStore

    def _entries(self, query: EntryQuery) -> list[OutboxEntry]:
        state, project_id, thread_id, after_seq, limit = astuple(query)
        postgres = self.store.dialect == "postgres"
        synced = "synced" if postgres else "synced = 1"
        clauses = {
            None: None,
            "pending": "NOT synced" if postgres else "synced = 0",
            "synced": f"{synced} AND sync_error IS NULL",
            "quarantined": f"{synced} AND sync_error IS NOT NULL",
        }
        where = [w for w in (clauses[state],) if w]
        for clause, value in (
            ("project_id = :p", project_id),
            ("execution_id = :t", thread_id),
            ("seq > :after", after_seq),
        ):
            if value is not None:
                where.append(clause)
        rows = self.store.query(
            " AND ".join(where), limit=limit, p=project_id, t=thread_id, after=after_seq
        )
        return [
            OutboxEntry(
                thread_id=r.execution_id,
                checkpoint_id=r.checkpoint_id,
                namespace="",
                seq=int(r.seq),
                project_id=r.project_id or "",
                created_at=parse_time(r.created_at) or _EPOCH,
                size_bytes=int(r.size_bytes or 0),
                synced=bool(r.synced),
                sync_error=r.sync_error,
                step_type=r.step_type,
            )
            for r in rows
        ]


class FastAIAgentScans(Scans):
    """Column reads from the normalised query's scalar columns (the JSON is never parsed)."""

    store: FastAIAgentStore

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        rows = (
            (
                r.execution_id,
                "",
                r.execution_id,
                r.checkpoint_id,
                int(r.seq),
                r.node_id or "",
                int(r.node_index or 0),
                r.step_type,
                r.status or COMPLETED,
                _micros(r.created_at),
                int(r.size_bytes or 0),
                bool(r.synced),
                r.sync_error,
                r.chain_name or "",
            )
            for r in self.store.scalar_rows(thread_id)
        )
        return column_chunks(CHECKPOINT_COLUMNS, rows, chunk_size)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        def rows() -> Iterator[tuple[Any, ...]]:
            for thread_id, group in itertools.groupby(
                self.store.scalar_rows(None), key=lambda r: r.execution_id
            ):
                members = list(group)
                points = [
                    (int(r.seq), _micros(r.created_at), r.status or COMPLETED, r.execution_id)
                    for r in members
                ]
                known = [p[1] for p in points if p[1] is not None]
                record = ThreadRecord(
                    thread_id=thread_id,
                    run_id=thread_id,
                    checkpoints=len(members),
                    size_bytes=sum(int(r.size_bytes or 0) for r in members),
                    newest_at=from_micros(max(known)) if known else None,
                )
                yield thread_row(record, points)

        return column_chunks(THREAD_COLUMNS, rows(), chunk_size)

    def _run_end_outputs(self, keys: list[CheckpointAddress]) -> dict[CheckpointAddress, Any]:
        """A run end's record: the SDK keeps ``run_status`` / ``run_error`` in its state.

        Only these rows' JSON is parsed, and only their ``run_*`` keys are kept.
        """
        store = self.store
        store.ready()
        found: dict[CheckpointAddress, Any] = {}
        sql = (
            f"SELECT node_output, state_snapshot FROM ({store._base}) AS c "  # noqa: S608
            "WHERE execution_id = :t AND checkpoint_id = :c"
        )
        with store.read("read run ends") as conn:
            for key in keys:
                thread_id, namespace, checkpoint_id = key
                row = (
                    None
                    if namespace
                    else conn.execute(sa.text(sql), {"t": thread_id, "c": checkpoint_id}).first()
                )
                if row is None:
                    continue
                state, output = _json(row.state_snapshot)[0], _json(row.node_output)[0]
                record = (
                    {k: v for k, v in state.items() if k.startswith("run_")}
                    if isinstance(state, dict)
                    else {}
                )
                found[key] = {**record, **(output if isinstance(output, dict) else {})}
        return found


def _micros(value: Any) -> int | None:
    parsed = parse_time(value)
    return None if parsed is None else to_micros(parsed)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _json(value: Any) -> tuple[Any, bool]:
    """A JSON column's value and whether it was readable (NULL or empty reads as ``{}``)."""
    if value is None or value == "":
        return {}, True
    if not isinstance(value, str):
        return value, True  # Postgres JSONB arrives decoded
    try:
        return json.loads(value), True
    except ValueError:
        return {}, False


def _row(r: Any) -> Row:
    parsed = {name: _json(getattr(r, name)) for name in _JSON_FIELDS}
    unreadable = [name for name, (_, ok) in parsed.items() if not ok]
    counters = parsed["iteration_counters"][0]
    return Row(
        Checkpoint(
            thread_id=r.execution_id,
            run_id=r.execution_id,
            checkpoint_id=r.checkpoint_id,
            parent_checkpoint_id=r.parent_checkpoint_id,
            runner=r.chain_name or "",
            agent_path=r.agent_path,
            node_id=r.node_id or "",
            step=int(r.node_index or 0),
            step_type=r.step_type,
            status=r.status or COMPLETED,
            state=parsed["state_snapshot"][0],
            node_input=parsed["node_input"][0],
            node_output=parsed["node_output"][0],
            iteration=int(r.iteration or 0),
            iteration_counters=counters if isinstance(counters, dict) else {},
            interrupt_reason=r.interrupt_reason,
            interrupt_context=parsed["interrupt_context"][0],
            created_at=parse_time(r.created_at),
            metadata={"unreadable": unreadable} if unreadable else {},
            project_id=r.project_id or "",
            seq=int(r.seq),
            size_bytes=int(r.size_bytes or 0),
        )
    )
