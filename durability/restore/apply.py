"""Applying a restore plan, and the restores built on it: by hand, and when a resume finds the
thread missing.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import TYPE_CHECKING

from durability._util import redact_url
from durability.errors import (
    RestoreError,
)
from durability.model import (
    Checkpoint,
    Deleted,
    Park,
)
from durability.restore.plan import (
    ENV_RESTORE,
    RESTORE_LEASE,
    LocalThread,
    RestorePlan,
    RestoreResult,
    _held_locally,
    _park_refusal,
    connections_for,
    local_thread,
    plan_restore,
    restore_enabled,
)
from durability.stores.base import Store
from durability.stores.ids import check_id

if TYPE_CHECKING:
    from durability.replication.connection import Connection

log = logging.getLogger("durability.restore")


def apply_restore(store: Store, plan: RestorePlan, *, overwrite: bool = False) -> RestoreResult:
    """Write what ``plan`` lists into ``store``, as already replicated rows.

    Every check is made again against ``store`` now, before anything is written: its format
    generation, whether it can hold the plan's park, and what it holds of the thread. Then,
    holding the thread's lease: the rows in order (``synced=True``), the park (the last row
    and its park in one transaction), and the ledger record (owner; the finished mark when the
    rows say the ended run owns the thread).

    ``overwrite=True`` replaces a local thread: it deletes every checkpoint, pending write, park
    and ledger record the store holds of it (rows the plane does not have are lost for good;
    the plan and :attr:`RestoreResult.replaced` count them), then writes the plane's copy. It
    never overrides a live lease: a thread a run is executing is refused either way.

    Raises:
        CheckpointStoreFormatError: The store holds another format generation (reset it first).
        RestoreError: The store already holds the thread (and ``overwrite`` is false), or cannot
            hold the plan's park (the message names ``single_worker=True`` or a shared store).
        LeaseHeld: A run, or another restore, holds the thread's lease.
    """
    thread_id = plan.thread_id
    if plan.empty:
        return RestoreResult(thread_id, warnings=plan.warnings)
    store.ready()
    refusal = None if plan.park is None else _park_refusal(store, plan.park)
    if refusal is not None:
        raise RestoreError(f"{refusal}; nothing was written")
    holder = f"restore:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    store.acquire_lease(thread_id, holder, RESTORE_LEASE)
    try:
        local = local_thread(store, thread_id, holder=holder)
        deleted = None if local is None else _replace(store, thread_id, local, holder, overwrite)
        written, park = _write(store, plan)
    finally:
        store.release_lease(thread_id, holder)
    log.info(
        "restored thread %r into %r from the plane %s: %d checkpoint(s) (%s)%s",
        thread_id[:80],
        store,
        plan.target,
        len(written),
        plan.source,
        f", parked until {park.deadline.isoformat()} ({park.deadline_source})" if park else "",
    )
    return RestoreResult(
        thread_id,
        checkpoints=tuple(written),
        park=park,
        replaced=local,
        deleted=deleted,
        warnings=plan.warnings,
    )


def _replace(
    store: Store, thread_id: str, local: LocalThread, holder: str, overwrite: bool
) -> Deleted:
    """Delete the local thread a restore with ``overwrite`` replaces (else refuse), keeping
    the restore's lease."""
    if not overwrite:
        raise RestoreError(f"refusing to restore into {store!r}: {_held_locally(thread_id, local)}")
    deleted = store.delete_thread(thread_id)
    store.acquire_lease(thread_id, holder, RESTORE_LEASE)  # the delete took the ledger
    log.warning(
        "restore of thread %r into %r replaced the local thread: deleted %d checkpoint(s) "
        "(%d not on the plane) and %d pending write(s)%s",
        thread_id[:80],
        store,
        deleted.checkpoints,
        local.unsynced,
        deleted.writes,
        " and its pending park" if local.park is not None else "",
    )
    return deleted


def _write(store: Store, plan: RestorePlan) -> tuple[list[Checkpoint], Park | None]:
    """Write the plan's rows (one transaction), then its park row with the park (another), then
    the ledger record. A park that fails to land takes the rows written before it back out."""
    rows = list(plan.checkpoints)
    park_row = rows.pop() if plan.park is not None else None
    written = store.put_many(rows, synced=True)
    park = None
    if park_row is not None and plan.park is not None:
        try:
            assert store.parks is not None  # the plan checked the store can hold the park
            stored, park = store.parks.park(
                park_row,
                deadline=plan.park.deadline,
                reason=plan.park.reason,
                context=plan.park.context,
                deadline_source=plan.park.deadline_source,
                synced=True,
            )
        except BaseException:
            try:
                store.delete_checkpoints(
                    plan.thread_id, [(c.namespace, c.checkpoint_id) for c in written]
                )
            except Exception:  # never hide why the park failed
                log.exception("could not take back a partial restore of %r", plan.thread_id[:80])
            raise
        written.append(stored)
    if plan.owner is not None and plan.latest is not None:
        store.record_run_start(plan.thread_id, run_id=plan.latest.run_id, owner=plan.owner)
        if plan.marks_finished:
            store.mark_finished(plan.thread_id)
    return written, park


def restore_from_plane(
    store: Store, thread_id: str, connection: Connection | None = None
) -> Checkpoint | None:
    """Restore ``thread_id`` from the plane into ``store``; the latest checkpoint written, or ``None``.

    Restoring by hand: plan and apply in one call, for inspecting a run or restoring
    into a store you are not about to run. ``None`` when not connected (no ``connection`` and no
    active connection of the store) or when the plane holds nothing of the thread. Not governed
    by ``DURABILITY_RESTORE_FROM_PLANE`` (an explicit call; the switch governs the restore a
    resume makes by itself).

    Raises:
        RestoreError: the plane could not be read, the store already holds the thread, or it
            cannot hold the run's park; :class:`~durability.errors.CheckpointStoreFormatError`
            and :class:`~durability.errors.LeaseHeld` as :func:`apply_restore`.
    """
    check_id(thread_id, "thread_id", action="restore a thread from the plane")
    candidates = [connection] if connection is not None else connections_for(store)
    if not any(c is not None and c.active for c in candidates):
        return None
    plan = plan_restore(store, thread_id, connection)
    return apply_restore(store, plan).latest if not plan.empty else None


def restore_if_missing(
    store: Store, thread_id: str, connection: Connection | None = None
) -> Checkpoint | None:
    """The restore a resume makes by itself: the latest restored checkpoint, or ``None`` if none
    was made.

    Restores only when ``store`` has no checkpoint of the thread (the local copy always wins:
    the plane is not consulted), only when ``DURABILITY_RESTORE_FROM_PLANE`` allows it (read
    before any network call) and only when connected (``connection``, else this process's
    active connections of the store, tried in turn). A thread another worker restored meanwhile
    is left to it (``None``). Logged at INFO.
    """
    return restore_missing(store, thread_id, connection)[0]


def restore_missing(
    store: Store, thread_id: str, connection: Connection | None
) -> tuple[Checkpoint | None, str]:
    """The restore, and why nothing was restored (for the caller's refusal) when it was not."""
    if store.has_thread(thread_id):
        return None, ""
    if not restore_enabled():
        return (
            None,
            f"restore from the plane is off ({ENV_RESTORE}={os.environ.get(ENV_RESTORE)!r})",
        )
    candidates = [connection] if connection is not None else connections_for(store)
    active = [c for c in candidates if c is not None and c.active]
    if not active:
        return None, "it is not connected to a plane, so the plane was not asked"
    for conn in active:
        try:
            plan = plan_restore(store, thread_id, conn)
            if plan.empty:
                continue
            result = apply_restore(store, plan)
        except RestoreError:
            if store.has_thread(thread_id):  # another worker restored it meanwhile
                return None, ""
            raise
        log.debug(  # apply_restore logged the restore itself at INFO
            "thread %r was missing from %r: restored %d checkpoint(s) from the plane %s",
            thread_id[:80],
            store,
            len(result.checkpoints),
            conn.target,
        )
        return result.latest, ""
    targets = ", ".join(sorted({redact_url(c.target) for c in active}))
    return None, f"the plane ({targets}) holds none either"
