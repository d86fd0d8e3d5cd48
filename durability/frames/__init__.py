"""pandas DataFrames of a store: checkpoints, threads, outbox, backlog, retention, parks, runs.

Every function takes an open store (any provider, the read-only foreign stores included) and
returns a DataFrame with exactly the columns listed in :data:`COLUMNS`, in that order and with
those dtypes. Times are ``datetime64[ns, UTC]``, durations ``timedelta64[ns]``, ids and texts
pandas ``string``; a missing value is ``NaT`` / ``<NA>``. Payloads are never decoded, except
``state`` when :func:`checkpoints` is asked for it.

Aggregation happens in the store (:meth:`~durability.stores.Store.checkpoint_columns`,
:meth:`~durability.stores.Store.thread_columns`, :meth:`~durability.stores.Store.outbox_columns`):
SQL stores answer with one ``GROUP BY`` / window-function query read in chunks, Redis with
``SCAN`` and pipelined scripts that return only the checkpoints' headers, and the frames are
built from column arrays, never from lists of objects.

========================  ===================================================================
frame                     one row per
========================  ===================================================================
:func:`checkpoints`       checkpoint, in write order (``seq``)
:func:`threads`           thread: totals, newest checkpoint, ledger, lease, park
:func:`idle_gaps`         thread of a random sample of a :func:`threads` frame: its idle gaps
:func:`outbox`            outbox entry: pending, synced or quarantined, with the plane's reason
:func:`backlog`           instant of a time grid: rows pending then, age of the oldest
:func:`retention`         thread, as :func:`durability.sweep.plan_sweep` would treat it
:func:`parks`             pending park: deadline and time left
:func:`erasures`          erased thread (tombstone): when, who, what its receipt removed
:func:`encryption`        key id: its status against the keyring, rows, bytes, share of rows
:func:`problems`          problem ``durability doctor`` finds: check, severity, rows, fix
:func:`runs`              run (local run health); :func:`plane_runs` the same from a plane
:func:`activity`          time bucket: checkpoints written and their bytes (counted in the store)
:func:`owners`            owner: threads, checkpoints, bytes, finished (counted in the store)
:func:`top_threads`       one of the ``top`` newest (or largest) threads (ranked in the store)
:func:`outbox_states`     outbox state: rows, bytes, attempts (counted in the store)
========================  ===================================================================

A store of millions of checkpoints: the frames of one row per thread or checkpoint grow with
it; :func:`activity`, :func:`owners`, :func:`top_threads`, :func:`outbox_states` and
``runs(store, sample=N)`` do not (their size follows the groups, ``top`` or ``N``), and are what
the notebooks show.

Column notes:

* ``threads.max_idle_gap``: the longest time between two consecutive checkpoints of the thread
  (write order, all namespaces); ``NaT`` with fewer than two. ``threads(store, lean=True)``
  leaves it out with ``status`` and ``run_id`` (reads of their own in a SQL store);
  :func:`idle_gaps` measures it for a random sample of a frame's threads. ``status`` is the newest
  checkpoint's; ``run_id`` the ledger's last run start, else the newest checkpoint's run.
  ``lease_holder`` / ``lease_expires_at`` show a lease live at ``now``; ``parked`` is a
  pending park whose deadline is after ``now``. ``unreplicated`` (int64) counts the thread's
  checkpoints the plane does not have (pending or quarantined outbox rows) in a store that
  replicates (some process recorded a connection), as the sweep's replication filter reads
  it; ``0`` in a store that does not. Like a live park or lease, it spares the thread.
* ``outbox.age``: how long the row waited — ``now - created_at`` while pending,
  ``synced_at - created_at`` once the plane has it or refused it (``NaT`` if unknown).
* ``backlog``: a row is pending from its ``created_at`` until its ``synced_at`` (when the
  plane took or quarantined it). Rows synced with no recorded time (written before the store
  replicated, or by the fastaiagent SDK) never count; a released row counts from its
  ``created_at`` again.
* ``runs.status``: ``completed`` / ``failed`` (its run end), ``parked`` (a pending park on its
  last checkpoint), ``running`` (a live lease), ``stalled`` (unfinished, the thread's latest
  run: killed, lost its lease or paused in step mode; resumable) or ``abandoned`` (unfinished,
  a later run started on its thread), as ``durability runs`` says. ``duration`` is
  ``ended_at - started_at`` (``NaT`` until it ends).
  ``reason`` is why a failed run ended, as its run end records it: ``error`` (a step raised;
  ``error`` holds the exception), ``cancelled`` (stopped), ``aborted`` or ``timeout``; ``<NA>``
  for any other run, for a plane that serves no history, and where the writer recorded none
  (the fastaiagent SDK records ``cancelled`` and ``timeout`` but no reason for an error).
* Foreign stores: a LangGraph store keeps a checkpoint's time inside its serialized blob, so
  its frames read each checkpoint through LangGraph's serializer (the values are not kept);
  a fastaiagent store is read with SQL, payloads untouched.
"""

from __future__ import annotations

from durability._extras import needs_extra

# Every module of this package needs pandas and numpy, and is only imported after this file:
# the notebook extra is asked for here, once.
with needs_extra("durability.frames"):  # the notebook extra
    import numpy  # noqa: F401
    import pandas  # noqa: F401

from durability.frames.columns import COLUMNS, OUTBOX_STATES, RUN_STATUSES, STATE_COLUMN
from durability.frames.encryption import ENCRYPTION_COLUMNS, encryption
from durability.frames.erasures import erasures
from durability.frames.problems import problems
from durability.frames.runs import plane_runs, runs
from durability.frames.store import (
    activity,
    backlog,
    checkpoints,
    idle_gaps,
    outbox,
    parks,
    retention,
    threads,
    write_times,
)
from durability.frames.summary import outbox_rows, outbox_states, owners, top_threads

__all__ = [
    "COLUMNS",
    "ENCRYPTION_COLUMNS",
    "OUTBOX_STATES",
    "RUN_STATUSES",
    "STATE_COLUMN",
    "activity",
    "backlog",
    "checkpoints",
    "encryption",
    "erasures",
    "idle_gaps",
    "outbox",
    "outbox_rows",
    "outbox_states",
    "owners",
    "parks",
    "plane_runs",
    "problems",
    "retention",
    "runs",
    "threads",
    "top_threads",
    "write_times",
]
