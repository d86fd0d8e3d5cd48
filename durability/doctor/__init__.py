"""``durability doctor``: prove a store is whole, and repair what is safe to repair.

:func:`diagnose` runs every check in :data:`CHECKS` and returns a :class:`Diagnosis`: each
:class:`Problem` names its check, its severity, the thread, how many rows, what is wrong and
the command that fixes it. Nothing is written. The checks, by family:

=================================  =========  ================================================
check                              severity   what it finds
=================================  =========  ================================================
``format_generation``              error      a store in another format generation (alone)
``writes_without_checkpoint``      warning    pending writes whose checkpoint is gone
``outbox_without_checkpoint``      warning    Redis outbox records of rows that are gone
``missing_parent``                 error      a parent missing below older rows of the thread
``ledger_without_thread``          warning    a ledger record of a thread with no checkpoint
``park_without_thread``            error      a pending park on a thread with no checkpoint
``park_past_deadline``             info       a pending park whose deadline passed
``lease_of_ended_run``             warning    a lease recorded for a run that ended
``erased_thread_holds_rows``       error      an erased (tombstoned) thread still holding rows
``finished_past_due``              info       a finished mark long past due (no sweep ran)
``replica_short``                  error      with a plane: rows marked synced it lacks
``redis_index_mismatch``           warning    a Redis cross-slot index that disagrees with keys
``langgraph_unreferenced``         warning    LangGraph writes or blobs no checkpoint references
``fastaiagent_*``                  see below  fastaiagent rows its SDK's known bugs leave
=================================  =========  ================================================

On a fastaiagent store (read-only: reported, never repaired), :mod:`durability.doctor.fastaiagent`
adds ``fastaiagent_run_end_quarantined`` and ``fastaiagent_idempotency_without_execution``
(warnings), and on SQLite ``fastaiagent_outbox_stalled`` (error: an unsent NaN),
``fastaiagent_resent_forever`` and ``fastaiagent_created_at_misordered`` (warnings).

A store is whole (:attr:`Diagnosis.clean`) when nothing of severity ``error`` or ``warning``
is found: the ``info`` findings are the sweep's pending work, which any store between two sweeps
has. What the seeds intend is not reported: a flow's owned session threads marked in the
deployment's ledger while their agents ran on a per-run store, a run's ledger entry before its
first checkpoint (younger than ``grace``), a fork's origin, a restore of only the latest
checkpoint and a thread pruned to its latest (the oldest row of its namespace).
"""

from __future__ import annotations

from durability.doctor.diagnose import CHECKS, DEFAULT_GRACE, DEFAULT_OVERDUE, diagnose
from durability.doctor.model import PROBLEM_FIELDS, SEVERITIES, Check, Diagnosis, Problem

__all__ = [
    "CHECKS",
    "DEFAULT_GRACE",
    "DEFAULT_OVERDUE",
    "PROBLEM_FIELDS",
    "SEVERITIES",
    "Check",
    "Diagnosis",
    "Problem",
    "diagnose",
]
