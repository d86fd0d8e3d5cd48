"""``durability doctor --fix``: the safe repairs, as validate → plan → apply.

Only the repairs listed here are made, each named by the check that finds what it repairs:

========================  =====================================================  ============
repair                    what it does                                           deletes state
========================  =====================================================  ============
``drop_orphan_writes``    delete pending writes whose checkpoint is gone         yes (--yes)
``release_ended_leases``  release a lease still held for a run that ended        no
``rebuild_redis_indexes`` re-derive the Redis cross-slot indexes from the keys   no
``drop_orphan_outbox``    delete outbox and synced records whose row is gone     no
                          (nothing to send)
``requeue_missing_rows``  put rows the plane lacks back in the outbox (a         no
                          connected drain sends them again)
========================  =====================================================  ============

:func:`plan_repairs` is pure: it turns a :class:`~durability.doctor.Diagnosis` into a
:class:`RepairPlan` a notebook can show. :func:`apply_repairs` re-checks what each step
assumed right before acting (a write's checkpoint still absent, the lease still the same
holder's) and never deletes state unless ``allow_deletes`` (the CLI's ``--yes``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durability.doctor.model import Diagnosis, Problem
from durability.doctor.outbox import drop_orphan_outbox, requeue
from durability.errors import ReadOnlyStoreError
from durability.stores.rows import Select

if TYPE_CHECKING:
    from durability.stores.base import Store

#: The repairs that delete state (what ``--yes`` allows).
DELETES = frozenset({"drop_orphan_writes"})


@dataclass(frozen=True, slots=True)
class RepairStep:
    """One repair of one problem: which, on which thread, how many rows, whether it deletes."""

    repair: str
    check: str
    thread_id: str | None
    rows: int
    deletes: bool
    keys: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RepairPlan:
    """The repairs ``--fix`` would make, and the problems it leaves (no safe repair)."""

    store: str
    steps: list[RepairStep]
    left: list[Problem]

    @property
    def empty(self) -> bool:
        """Whether there is nothing to repair."""
        return not self.steps


@dataclass
class RepairResult:
    """What :func:`apply_repairs` did: per repair, rows repaired; steps it skipped and why."""

    applied: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[RepairStep, str]] = field(default_factory=list)


def plan_repairs(diagnosis: Diagnosis) -> RepairPlan:
    """The safe repairs of the diagnosis's problems (pure: nothing is read or written)."""
    from durability.doctor.diagnose import CHECKS

    repairs = {c.name: c.repair for c in CHECKS if c.repair is not None}
    steps, left = [], []
    for p in diagnosis.problems:
        repair = repairs.get(p.check)
        if repair is None:
            left.append(p)
        else:
            steps.append(
                RepairStep(repair, p.check, p.thread_id, p.rows, repair in DELETES, p.keys)
            )
    return RepairPlan(diagnosis.store, steps, left)


def apply_repairs(store: Store, plan: RepairPlan, *, allow_deletes: bool = False) -> RepairResult:
    """Make the plan's repairs; a step that deletes state is skipped unless ``allow_deletes``.

    A foreign store is refused before anything is written (it is read-only here).
    """
    if getattr(store, "source", ""):
        raise ReadOnlyStoreError(
            f"cannot repair {plan.store}: it is a {store.provider} store, read-only here; "
            "repair it with the tool that wrote it"
        )
    result = RepairResult()
    chosen: dict[str, list[RepairStep]] = defaultdict(list)
    for step in plan.steps:
        if step.deletes and not allow_deletes:
            result.skipped.append((step, "deletes state: pass --yes"))
        else:
            chosen[step.repair].append(step)
    for repair, steps in chosen.items():
        result.applied[repair] = REPAIRS[repair](store, steps)
    return result


def _drop_orphan_writes(store: Store, steps: list[RepairStep]) -> int:
    """Delete the steps' pending writes whose checkpoint is still absent (checked just before)."""
    return sum(_drop_thread_writes(store, step) for step in steps)


def _drop_thread_writes(store: Store, step: RepairStep) -> int:
    assert step.thread_id is not None
    by_checkpoint: dict[tuple[str, str], int] = defaultdict(int)
    for ns, cid, _task, _idx in step.keys:
        by_checkpoint[(ns, cid)] += 1
    absent = [
        key
        for key in by_checkpoint
        if not store._select(Select(step.thread_id, key[0], checkpoint_id=key[1]))
    ]
    if not absent:
        return 0
    return store.delete_checkpoints(step.thread_id, absent).writes


def _release_ended_leases(store: Store, steps: list[RepairStep]) -> int:
    """Release each lease if the same holder still holds it (``release_lease`` checks)."""
    return sum(_release_thread_lease(store, step) for step in steps)


def _release_thread_lease(store: Store, step: RepairStep) -> int:
    assert step.thread_id is not None
    before = store.thread(step.thread_id)
    for holder in step.keys:
        store.release_lease(step.thread_id, holder)
    after = store.thread(step.thread_id)
    held = before is not None and before.lease is not None and before.lease.holder in step.keys
    return int(held and (after is None or after.lease is None))


def _rebuild_redis_indexes(store: Store, steps: list[RepairStep]) -> int:
    """Re-derive every Redis index from the threads' keys (one reconcile); 0 if another
    process is reconciling right now (it repairs the same entries)."""
    threads = store.reconcile()  # type: ignore[attr-defined]
    return sum(step.rows for step in steps) if threads else 0


def _drop_orphan_outbox(store: Store, steps: list[RepairStep]) -> int:
    """Delete the outbox and synced records whose row is still gone (checked as they go)."""
    return drop_orphan_outbox(store, [key for step in steps for key in step.keys])


def _requeue_missing_rows(store: Store, steps: list[RepairStep]) -> int:
    """Re-queue the rows the plane lacks (still held and marked synced: checked as they move)."""
    rows: dict[str, list[int]] = defaultdict(list)
    for step in steps:
        assert step.thread_id is not None
        rows[step.thread_id] += [seq for _ns, _cid, seq in step.keys]
    return requeue(store, dict(rows), store.clock())


REPAIRS: dict[str, Callable[[Store, list[RepairStep]], int]] = {
    "drop_orphan_outbox": _drop_orphan_outbox,
    "requeue_missing_rows": _requeue_missing_rows,
    "drop_orphan_writes": _drop_orphan_writes,
    "release_ended_leases": _release_ended_leases,
    "rebuild_redis_indexes": _rebuild_redis_indexes,
}
