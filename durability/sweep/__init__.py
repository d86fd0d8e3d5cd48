"""The checkpoint sweep: the one operation that deletes threads.

It is admin-only and destructive, and nothing runs it in the background: drive it on a cadence
(cron, a Kubernetes CronJob, a scheduler; see the retention guide). It covers the store it is
given — the deployment's configured store, the one every process shares.

Two horizons:

* ``finished``: every thread marked finished whose due time (fixed at its mark, from the
  retention in force then) is at or before ``now`` is deleted, on every provider.
* ``waiting``: on providers that sweep waiting threads (postgres, sqlite), every thread whose
  newest checkpoint is older than its waiting retention (the one declared at its latest run
  start, else the platform's) is deleted — a finished thread too, when that comes before its
  mark's due time (a mark never extends a thread's life; Redis's TTL takes it marked or not). On redis the key TTL does this and on memory the
  thread lives with its process: both are reported as skipped.

It works as validate → plan → apply. :func:`plan_sweep` reads every thread once, classifies it
and asks every live-thread filter about every due thread; :func:`sweep` computes the very same
plan and applies its ``delete`` rows, so a preview can never disagree with the sweep. A thread a
filter claims is spared: logged at WARNING, counted on
``durability_checkpoint_sweep_spared_total{horizon,owner}``, listed in the result, and — if it
is finished — left in the finished set, so the next sweep asks again. A filter that raises fails
the sweep before anything is deleted.

Deleting a thread removes every checkpoint, pending write, ledger record, park and outbox row it
holds, in set-based batches. A checkpoint a run writes while the thread is being deleted is
deleted again, round after round, up to :data:`MAX_ROUNDS`; then the sweep fails loudly naming
the thread. The Redis store's own delete already repeats until the thread is empty and raises
:class:`~durability.errors.CheckpointDeleteError` as soon as a round stops making progress.
"""

from __future__ import annotations

from durability.sweep.apply import DeletedThread, SkippedHorizon, SparedThread, SweepResult, sweep
from durability.sweep.diff import plans_diff, policy_diff
from durability.sweep.filters import (
    LEASE_FILTER,
    PARK_FILTER,
    REPLICATION_FILTER,
    LiveThreadFilter,
    register_filter,
    registered_filters,
    unregister_filter,
)
from durability.sweep.plan import (
    ACTIONS,
    DEFAULT_BATCH,
    HORIZONS,
    MAX_ROUNDS,
    PLAN_COLUMNS,
    PlanRow,
    SweepPlan,
    plan_sweep,
    plan_sweeps,
)

__all__ = [
    "ACTIONS",
    "DEFAULT_BATCH",
    "HORIZONS",
    "LEASE_FILTER",
    "MAX_ROUNDS",
    "PARK_FILTER",
    "PLAN_COLUMNS",
    "REPLICATION_FILTER",
    "DeletedThread",
    "LiveThreadFilter",
    "PlanRow",
    "SkippedHorizon",
    "SparedThread",
    "SweepPlan",
    "SweepResult",
    "plan_sweep",
    "plan_sweeps",
    "plans_diff",
    "policy_diff",
    "register_filter",
    "registered_filters",
    "sweep",
    "unregister_filter",
]
