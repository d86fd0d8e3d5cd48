"""Restore-anywhere: fetch a thread from the plane and write it into a local store.

The plane serves, the library executes: a restore fetches a thread's checkpoints and writes them
locally, and a normal local resume continues from them. It validates, plans, then applies::

    from durability import restore

    plan = restore.plan_restore(store, "order-42", conn)   # reads only; a pure value
    plan.to_frame()                                        # a notebook shows it as a table
    result = restore.apply_restore(store, plan)            # writes exactly what the plan lists

    restore.restore_from_plane(store, "order-42")          # plan + apply: the latest, or None

What a restore writes: from this project's plane the thread's whole history (so a failed run
resumes from its last real step on a fresh machine, which the fastaiagent SDK cannot: it
restores only the latest row), from a plane that serves only the latest checkpoint (a 404 on the history path) that one
row. Rows are written as already replicated (``synced=True``): they are never sent back.
An interrupted run gets its pending park back, with the deadline its ask declared (the runner
keeps it in the row's run facts) or, from a plane that carries no deadline, the thread's waiting
horizon: the pause's time plus the waiting retention, the latest deadline the original park
could have had. A minted or flow-owned thread whose run ended is marked finished again (the
ledger is not replicated; the rows' run facts say who owns the thread).

Applying never overwrites a local thread silently: it refuses, unless ``overwrite=True``, which
deletes the local thread (every checkpoint, pending write, park and ledger record) and writes
the plane's copy; the result says what was replaced. It refuses a store in another format
generation, and a parked run into a store that cannot hold a park (naming ``single_worker=True``
or a shared store). It holds the thread's lease while it writes, so two restorers, or a restorer
and a run, never interleave.

A rehearsal that can run any number of times restores into a copy of the store made for it
(:func:`copy_store`, SQLite) and picks what to bring back with :func:`lost_threads` (the
threads the store lacks, those a runner can resume first).

Resume-time restore (:func:`restore_if_missing`, called by :func:`durability.runs.locate_thread`
for resume, fork and stop) follows three rules: only when the local store has no
record of the thread, only when connected (an active connection for the store, or one passed
in), and never when ``DURABILITY_RESTORE_FROM_PLANE`` turns it off. The switch is read before
any network call.
"""

from __future__ import annotations

from durability.restore.apply import (
    apply_restore,
    restore_from_plane,
    restore_if_missing,
    restore_missing,
)
from durability.restore.plan import (
    ENV_RESTORE,
    FRAME_COLUMNS,
    RESTORE_LEASE,
    SOURCE_HISTORY,
    SOURCE_LATEST,
    LocalThread,
    RestorePlan,
    RestoreResult,
    connections_for,
    local_thread,
    plan_restore,
    restore_enabled,
)
from durability.restore.rehearse import RESUMABLE, copy_store, lost_threads, sqlite_path

__all__ = [
    "ENV_RESTORE",
    "FRAME_COLUMNS",
    "RESTORE_LEASE",
    "RESUMABLE",
    "SOURCE_HISTORY",
    "SOURCE_LATEST",
    "LocalThread",
    "RestorePlan",
    "RestoreResult",
    "apply_restore",
    "connections_for",
    "copy_store",
    "local_thread",
    "lost_threads",
    "plan_restore",
    "restore_enabled",
    "restore_from_plane",
    "restore_if_missing",
    "restore_missing",
    "sqlite_path",
]
