"""Reading runs back: locating a thread (restoring it from the plane when it is missing),
listing every run of a store with its status, and loading a runner by ``module:attr``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability.errors import (
    RunNotResumable,
)
from durability.model import (
    COMPLETED,
    FAILED,
    STEP_NODE,
    STEP_RUN_END,
    STEP_RUN_START,
    Checkpoint,
    Park,
)
from durability.restore import restore_missing
from durability.runs.vocabulary import (
    PARKED,
)
from durability.stores.base import Store
from durability.stores.ids import check_id
from durability.stores.parks import pending_parks

if TYPE_CHECKING:
    from durability.replication.connection import Connection

log = logging.getLogger("durability.runs")


def locate_thread(
    store: Store, thread_id: str, *, action: str, connection: Connection | None = None
) -> None:
    """The resume path's first look at a thread: restore it if missing, else refuse it.

    Resume, fork and stop call it before they take the thread's lease. When the store holds a
    checkpoint of the thread, the plane is not consulted (the local copy is the source of
    truth). Otherwise it is restored from the plane (restore-anywhere,
    :func:`durability.restore.restore_if_missing`) when ``DURABILITY_RESTORE_FROM_PLANE``
    allows it and the store is connected (``connection``, else its active connection); a thread
    still missing is refused with :class:`~durability.errors.RunNotResumable`, saying why the
    plane did not supply it.

    Raises:
        RunNotResumable: neither the store nor the plane holds the thread.
        ThreadErased: the thread was erased in this store (never restored).
        ErasedOnPlane: the plane erased the thread (it serves nothing of it).
        RestoreError: the plane could not be read, or the restore was refused.
        LeaseHeld: another worker is restoring or running the thread.
    """
    check_id(thread_id, "thread_id", action=action)
    if store.has_thread(thread_id):
        return
    store.refuse_erased(thread_id, action)
    _, why_not = restore_missing(store, thread_id, connection)
    if not store.has_thread(thread_id):
        raise RunNotResumable(
            f"cannot {action}: the store {store!r} holds no checkpoint of it"
            + (f", and {why_not}" if why_not else "")
            + "; check the thread id and the store URL (`durability runs URL` lists the runs)"
        )


def read_thread(
    store: Store, thread_id: str, *, page: int = 1000, keep_sealed: bool = False
) -> list[Checkpoint]:
    """Every checkpoint of the thread's root namespace, oldest first (``seq`` order), paged
    (``keep_sealed``: sealed states left unopened, for readers of the clear fields)."""
    rows: list[Checkpoint] = []
    after: int | None = None
    while True:
        batch = store.history(thread_id, after_seq=after, limit=page, keep_sealed=keep_sealed)
        rows.extend(batch)
        if len(batch) < page:
            return rows
        after = batch[-1].seq


def last_step_of(
    history: Sequence[Checkpoint], run_id: str, before_seq: int | None
) -> Checkpoint | None:
    """The run's last row that is not a run end, before ``before_seq`` (seq order)."""
    for cp in reversed(history):
        if before_seq is not None and cp.seq is not None and cp.seq >= before_seq:
            continue
        if cp.run_id == run_id and not cp.is_run_end:
            return cp
    return None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a store, as ``durability runs`` shows it.

    ``status``: ``completed``, ``failed`` (with ``reason``), ``parked`` (with the park's
    ``park_reason``, ``park_deadline`` and ``time_left``), ``running`` (a live lease),
    ``stalled`` (no run end, not parked, not running: killed, lost its lease or paused in step
    mode; resumable) or ``abandoned`` (never ended, and a later run started on its thread).
    """

    thread_id: str
    run_id: str
    runner: str
    status: str
    last_step: str | None
    steps: int
    started_at: datetime | None
    updated_at: datetime | None
    reason: str | None = None
    error: str | None = None
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None
    park_reason: str | None = None
    park_deadline: datetime | None = None
    time_left: timedelta | None = None


def list_runs(
    store: Store, *, now: datetime | None = None, progress: bool = False
) -> list[RunInfo]:
    """Every run in the store, thread by thread, each with its status, lease and park.

    Reads each thread's root namespace whole, in ``seq`` order. ``progress`` shows a tqdm bar.
    """
    now = now if now is not None else store.clock()
    parks = {p.thread_id: p for p in pending_parks(store)}
    records: Iterator[Any] = store.iter_threads()
    if progress:
        from tqdm.auto import tqdm

        records = iter(tqdm(records, desc="threads", unit="thread", disable=None))
    infos: list[RunInfo] = []
    for record in records:
        history = read_thread(store, record.thread_id, keep_sealed=True)
        runs: dict[str, list[Checkpoint]] = {}
        for cp in history:
            runs.setdefault(cp.run_id, []).append(cp)
        lease = record.lease if record.lease is not None and record.lease.live(now) else None
        for run_id, rows in runs.items():
            infos.append(_run_info(record.thread_id, run_id, rows, history[-1], lease, parks, now))
    return infos


def _run_info(
    thread_id: str,
    run_id: str,
    rows: list[Checkpoint],
    thread_latest: Checkpoint,
    lease: Any,
    parks: dict[str, Park],
    now: datetime,
) -> RunInfo:
    last = rows[-1]
    steps = [r for r in rows if r.step_type not in (STEP_RUN_END, STEP_RUN_START)]
    park = parks.get(thread_id)
    info: dict[str, Any] = {}
    if last.is_run_end:
        record = last.node_output if isinstance(last.node_output, dict) else {}
        state = last.state if isinstance(last.state, dict) else {}
        info.update(
            status=COMPLETED if last.status != FAILED else FAILED,
            reason=record.get("run_reason", state.get("run_reason")),
            error=record.get("run_error", state.get("run_error")),
        )
    elif park is not None and park.run_id == run_id and park.checkpoint_id == last.checkpoint_id:
        info.update(
            status=PARKED,
            park_reason=park.reason,
            park_deadline=park.deadline,
            time_left=park.deadline - now,
        )
    elif lease is not None and lease.run_id == run_id:
        info.update(status="running")
    else:
        info.update(status="stalled" if last is thread_latest else "abandoned")
    if lease is not None and lease.run_id == run_id:
        info.update(lease_holder=lease.holder, lease_expires_at=lease.expires_at)
    return RunInfo(
        thread_id=thread_id,
        run_id=run_id,
        runner=last.runner,
        last_step=steps[-1].node_id if steps else None,
        steps=sum(1 for r in steps if r.step_type == STEP_NODE),
        started_at=rows[0].created_at,
        updated_at=last.created_at,
        **info,
    )


def iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "-"
