"""The sidecar ledger of a LangGraph store: durability's own store beside LangGraph's tables
(``<file>.durability`` or schema ``<schema>_durability``) holding the finished marks, run starts
and leases LangGraph keeps none of; LangGraph's tables are never altered (decision 0080)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from durability.model import Lease, ThreadRecord
from durability.settings import Retention
from durability.stores.ledger import Ledger

if TYPE_CHECKING:
    from durability.stores.foreign.langgraph import LangGraphStore


def sidecar_url(store: LangGraphStore, given: str | None) -> str:
    """The URL of the durability store keeping the LangGraph store's ledger."""
    if given:
        return given
    if store.dialect == "sqlite":
        return f"sqlite:///{store.path}.durability"
    base = store.engine.url.set(drivername="postgresql+psycopg")
    schema = f"{store.schema or 'public'}_durability"
    return base.update_query_dict({"schema": schema}).render_as_string(hide_password=False)


def sidecar_exists(store: LangGraphStore) -> bool:
    """Whether the sidecar was ever created (a read-only store never creates it)."""
    url = store.sidecar_url
    if url.startswith("sqlite:///"):
        from pathlib import Path

        return Path(url.removeprefix("sqlite:///").split("?", 1)[0]).is_file()
    import sqlalchemy as sa

    schema = sa.make_url(url).query.get("schema")
    with store.read("look for the sidecar ledger") as conn:
        found = conn.execute(
            sa.text(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = "
                "coalesce(:s, current_schema()) AND table_name = 'durability_threads'"
            ),
            {"s": schema},
        ).first()
    return found is not None


class SidecarLedger(Ledger):
    """The LangGraph store's ledger, kept in the sidecar store (see the module)."""

    store: LangGraphStore

    def _side(self, action: str) -> Ledger:
        if not self.store.writable:
            raise self.store.refuse(action)
        side = self.store.sidecar(create=True)
        assert side is not None
        assert side.ledger is not None
        return side.ledger

    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        self._side("record a run start")._start(thread_id, run_id, owner, retention, now)

    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        self._side("mark a thread finished")._mark(thread_id, finished_at, due)

    def _unmark(self, thread_id: str) -> None:
        self._side("unmark a finished thread")._unmark(thread_id)

    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        return self._side("take a lease")._acquire(thread_id, holder, run_id, now, expires_at)

    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        return self._side("renew a lease")._renew(thread_id, holder, now, expires_at)

    def _release(self, thread_id: str, holder: str) -> None:
        self._side("release a lease")._release(thread_id, holder)

    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        side = self.store.sidecar(create=False)
        if side is None or side.ledger is None:
            return []
        found = [self.store.thread(r.thread_id) for r in side.ledger._finished_due(now)]
        return [r for r in found if r is not None]


def with_ledger(record: ThreadRecord, ledger: ThreadRecord | None) -> ThreadRecord:
    """A LangGraph thread's record with the sidecar's ledger fields (its totals kept)."""
    if ledger is None:
        return record
    return replace(
        ledger,
        checkpoints=record.checkpoints,
        size_bytes=record.size_bytes,
        newest_at=record.newest_at,
        newest_seq=record.newest_seq,
    )


__all__ = ["SidecarLedger", "sidecar_exists", "sidecar_url", "with_ledger"]
