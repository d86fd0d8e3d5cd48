"""Thinning: keep each thread resumable but drop its older history.

:func:`plan_thin` says, per thread, which checkpoints thinning keeps and which it drops;
:func:`thin` computes the same plan and deletes its drops (with their pending writes, and on a
LangGraph Postgres store the blobs no kept checkpoint references), a batch of threads per
transaction. Two rules, alone or together:

* ``keep_latest=N``: keep the newest ``N`` checkpoints of each namespace (write order);
* ``newer_than=T``: keep every checkpoint created at or after ``T``.

The newest checkpoint of each namespace is always kept, and never dropped either is what a
resume needs: the checkpoint before a kept run end (where a failed run resumes), a parked
run's checkpoint, rows the plane does not have yet (a store that replicates), and on a
LangGraph Postgres store the parent of a kept checkpoint older than format 4 (its pending
sends live there, as LangGraph's ``prune`` keeps it). A thread whose channels are stored as
deltas (LangGraph's ``DeltaChannel``: ``counters_since_delta_snapshot`` in its metadata) is
refused, as LangGraph's own ``prune`` refuses it: its latest value is rebuilt from older
checkpoints. ``due_only=True`` thins only the threads the sweep plan would delete (a sweep
action: thin instead of delete), sparing what the live-thread filters claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability.clock import as_utc, from_micros
from durability.errors import ConfigError
from durability.settings import Settings
from durability.stores.base import Store

if TYPE_CHECKING:
    import pandas as pd

    from durability.sweep.plan import SweepPlan

#: A checkpoint thinning considers: (namespace, checkpoint_id, created_at, size_bytes, why kept
#: regardless or "", delta flag), in write order within its thread.
Point = tuple[str, str, datetime | None, int, str, bool]


@dataclass(frozen=True, slots=True)
class ThinRow:
    """What thinning does with one thread."""

    thread_id: str
    action: str  # "thin", "keep" (nothing to drop) or "refused"
    checkpoints: int
    dropped: int
    dropped_bytes: int
    reason: str


@dataclass(frozen=True)
class ThinPlan:
    """One row per thread considered, and the keys each ``thin`` row drops."""

    provider: str
    rows: tuple[ThinRow, ...]
    drops: dict[str, list[tuple[str, str]]] = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """Threads per action, and the checkpoints and bytes thinning drops."""
        thinning = [r for r in self.rows if r.action == "thin"]
        return {
            "provider": self.provider,
            "threads": len(self.rows),
            "counts": {
                a: sum(r.action == a for r in self.rows) for a in ("thin", "keep", "refused")
            },
            "checkpoints": sum(r.dropped for r in thinning),
            "size_bytes": sum(r.dropped_bytes for r in thinning),
        }

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        names = list(ThinRow.__dataclass_fields__)
        return pd.DataFrame([[getattr(r, n) for n in names] for r in self.rows], columns=names)


@dataclass(frozen=True)
class ThinResult:
    """What :func:`thin` removed, per thread: (checkpoints, pending writes)."""

    plan: ThinPlan
    removed: dict[str, tuple[int, int]]

    @property
    def checkpoints(self) -> int:
        return sum(c for c, _ in self.removed.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.summary(),
            "removed": {"threads": len(self.removed), "checkpoints": self.checkpoints},
        }


def plan_thin(
    store: Store,
    *,
    keep_latest: int | None = None,
    newer_than: datetime | None = None,
    threads: Sequence[str] | None = None,
    due_only: bool = False,
    settings: Settings | None = None,
    now: datetime | None = None,
) -> ThinPlan:
    """Which checkpoints :func:`thin` drops, per thread (see the module); writes nothing."""
    if keep_latest is None and newer_than is None:
        raise ConfigError(
            "cannot plan thinning: give keep_latest=N (checkpoints kept per namespace) or "
            "newer_than=DATE (checkpoints kept from then on), or both"
        )
    if keep_latest is not None and keep_latest < 1:
        raise ConfigError(f"cannot plan thinning: keep_latest={keep_latest} must be at least 1")
    since = as_utc(newer_than) if newer_than is not None else None
    chosen = _chosen(store, threads, due_only, settings, now)
    rows: list[ThinRow] = []
    drops: dict[str, list[tuple[str, str]]] = {}
    for thread_id, points in _points(store, chosen):
        row, dropped = _judge(thread_id, points, keep_latest, since)
        rows.append(row)
        if dropped:
            drops[thread_id] = dropped
    return ThinPlan(store.provider, tuple(sorted(rows, key=lambda r: r.thread_id)), drops)


def thin(
    store: Store,
    *,
    keep_latest: int | None = None,
    newer_than: datetime | None = None,
    threads: Sequence[str] | None = None,
    due_only: bool = False,
    settings: Settings | None = None,
    now: datetime | None = None,
    batch_size: int = 500,
) -> ThinResult:
    """Compute :func:`plan_thin` and delete its drops, ``batch_size`` threads per transaction
    (LangGraph stores; a durability store thins thread by thread)."""
    from durability import metrics

    plan = plan_thin(
        store,
        keep_latest=keep_latest,
        newer_than=newer_than,
        threads=threads,
        due_only=due_only,
        settings=settings,
        now=now,
    )
    removed: dict[str, tuple[int, int]] = {}
    items = list(plan.drops.items())
    for start in range(0, len(items), batch_size):
        part = items[start : start + batch_size]
        for thread_id, d in _delete(store, part).items():
            removed[thread_id] = (d.checkpoints, d.writes)
        metrics.THIN_CHECKPOINTS.inc(sum(removed[t][0] for t, _ in part if t in removed))
    metrics.THIN_RUNS.inc()
    return ThinResult(plan, removed)


def thin_vs_delete(
    store: Store,
    *,
    keep_latest: int = 1,
    settings: Settings | None = None,
    now: datetime | None = None,
    sample: int | None = None,
    seed: int = 0,
    plan: SweepPlan | None = None,
) -> pd.DataFrame:
    """Per thread: the bytes a sweep would free by deleting it (when due) beside what thinning
    to the latest ``keep_latest`` checkpoints frees (for the planner's chart).

    ``sample=N`` plans thinning for about ``N`` threads picked at random (``seed`` fixes the
    pick) instead of every thread, each read by its id, and returns their rows only: what a
    store of millions of threads can afford. Either way ``attrs`` hold the whole store's
    figures the sweep plan counts exactly: ``threads``, ``due_threads`` and ``delete_frees``
    (bytes), and ``sample`` (the threads planned, ``None`` for all). ``plan`` is the sweep plan
    to use (default: :func:`plan_sweep` with ``settings`` at ``now``).
    """
    import numpy as np
    import pandas as pd

    from durability.sweep.plan import plan_sweep

    sweep_plan = plan if plan is not None else plan_sweep(store, settings, now)
    c = sweep_plan._columns
    going = c["action"] == "delete"
    picked: Any = np.arange(len(c["thread_id"]))
    if sample is not None:
        if sample < 1:
            raise ConfigError(f"cannot sample threads to thin: sample={sample} must be at least 1")
        if sample < len(picked):
            picked = np.sort(np.random.default_rng(seed).choice(picked, sample, replace=False))
    ids = c["thread_id"][picked].tolist()
    chosen = None if sample is None else ids
    thinning = plan_thin(store, keep_latest=keep_latest, threads=chosen)
    dropped = {r.thread_id: r.dropped_bytes for r in thinning.rows}
    sizes = c["size_bytes"][picked]
    frame = pd.DataFrame(
        {
            "thread_id": pd.array(ids, dtype="string"),
            "action_sweep": pd.array(c["action"][picked].tolist(), dtype="string"),
            "size_bytes": sizes.astype("int64"),
            "delete_frees": np.where(going[picked], sizes, 0).astype("int64"),
            "thin_frees": np.array([dropped.get(t, 0) for t in ids], dtype="int64"),
        }
    )
    frame.attrs.update(
        threads=len(going),
        due_threads=int(going.sum()),
        delete_frees=int(c["size_bytes"][going].sum()),
        sample=None if sample is None else len(ids),
    )
    return frame


# ---------------------------------------------------------------------------- rules


def _judge(
    thread_id: str, points: list[Point], keep_latest: int | None, since: datetime | None
) -> tuple[ThinRow, list[tuple[str, str]]]:
    n = len(points)
    if any(p[5] for p in points):
        return ThinRow(
            thread_id,
            "refused",
            n,
            0,
            0,
            "its channels are stored as deltas (DeltaChannel): the latest value is rebuilt from "
            "older checkpoints, so none is dropped",
        ), []
    by_ns: dict[str, list[int]] = {}
    for i, p in enumerate(points):
        by_ns.setdefault(p[0], []).append(i)
    keep: set[int] = set()
    for positions in by_ns.values():
        keep.add(positions[-1])
        if keep_latest is not None:
            keep.update(positions[-keep_latest:])
        if since is not None:
            keep.update(i for i in positions if _at_or_after(points[i][2], since))
    keep.update(i for i, p in enumerate(points) if p[4] == "protected")
    for i, p in enumerate(points):  # the row before a kept run end / an old-format kept row
        if i in keep and p[4] == "keep-previous":
            earlier = [j for j in by_ns[p[0]] if j < i]
            if earlier:
                keep.add(earlier[-1])
    dropped = [i for i in range(n) if i not in keep]
    if not dropped:
        return ThinRow(thread_id, "keep", n, 0, 0, "nothing older than what is kept"), []
    size = sum(points[i][3] for i in dropped)
    reason = f"keeps {n - len(dropped)} of {n} checkpoints"
    return ThinRow(thread_id, "thin", n, len(dropped), size, reason), [
        (points[i][0], points[i][1]) for i in dropped
    ]


def _at_or_after(when: datetime | None, since: datetime) -> bool:
    return when is not None and when >= since


def _chosen(
    store: Store,
    threads: Sequence[str] | None,
    due_only: bool,
    settings: Settings | None,
    now: datetime | None,
) -> set[str] | None:
    if not due_only:
        return None if threads is None else set(threads)
    from durability.sweep.plan import plan_sweep

    due = {r.thread_id for r in plan_sweep(store, settings, now).deletes()}
    return due if threads is None else due & set(threads)


def _points(store: Store, chosen: set[str] | None) -> Iterable[tuple[str, list[Point]]]:
    from durability.stores.foreign.langgraph import LangGraphStore

    if isinstance(store, LangGraphStore):
        from durability.stores.foreign.langgraph_retention import thin_points

        return thin_points(store, chosen)
    return _durability_points(store, chosen)


def _durability_points(store: Store, chosen: set[str] | None) -> Iterable[tuple[str, list[Point]]]:
    """A durability store's rows from its column scan; protections from its parks and outbox."""
    from durability.stores.parks import park_of

    unsent = _unsent(store, chosen)
    columns = (
        "thread_id",
        "namespace",
        "checkpoint_id",
        "seq",
        "step_type",
        "created_at",
        "size_bytes",
    )
    found: dict[str, list[tuple[Any, ...]]] = {}
    for chunk in _chunks(store, chosen, columns):
        for row in zip(*(chunk[c].tolist() for c in columns), strict=True):
            if chosen is None or row[0] in chosen:
                found.setdefault(row[0], []).append(row)
    for thread_id, rows in found.items():
        rows.sort(key=lambda r: r[3])
        park = park_of(store, thread_id) if store.parks is not None else None
        parked = park.checkpoint_id if park is not None else None
        points: list[Point] = []
        for _t, ns, cid, _seq, step_type, created, size in rows:
            why = ""
            if (thread_id, cid) in unsent or cid == parked:
                why = "protected"
            elif step_type == "run_end":
                why = "keep-previous"
            when = from_micros(created) if created is not None else None
            points.append((ns, cid, when, int(size or 0), why, False))
        yield thread_id, points


def _unsent(store: Store, chosen: set[str] | None) -> set[tuple[str, str]]:
    """``(thread_id, checkpoint_id)`` of the rows the plane lacks (pending or quarantined): the
    whole outbox's, or, for a few chosen threads, only those of the chosen threads the outbox
    counts (each asked by its id: a sample never reads the whole outbox)."""
    outbox = store.outbox
    if not store.replicates or outbox is None:
        return set()
    asked: list[str | None] = [None]  # None: every thread
    if chosen is not None and len(chosen) <= _BY_ID:
        asked = [*sorted(outbox.unreplicated().keys() & chosen)]
    return {
        (e.thread_id, e.checkpoint_id)
        for thread_id in asked
        for state in ("pending", "quarantined")
        for e in outbox(state=state, thread_id=thread_id)
    }


def _chunks(store: Store, chosen: set[str] | None, columns: Sequence[str]) -> Iterable[Any]:
    """The checkpoint columns thinning reads: every thread's in one scan, or, for a few chosen
    threads (a sample), each one's by its id."""
    if chosen is None or len(chosen) > _BY_ID:
        return store.checkpoint_columns(columns=columns)
    return (
        chunk
        for thread_id in sorted(chosen)
        for chunk in store.checkpoint_columns(thread_id, columns=columns)
    )


#: Up to this many chosen threads are read one by one (by id) instead of in one scan.
_BY_ID = 10_000


def _delete(store: Store, part: list[tuple[str, list[tuple[str, str]]]]) -> dict[str, Any]:
    from durability.stores.foreign.langgraph import LangGraphStore

    if isinstance(store, LangGraphStore):
        if not store.writable:
            raise store.refuse("thin threads")
        from durability.stores.foreign.langgraph_retention import delete_checkpoints

        return delete_checkpoints(store, [(t, ns, cid) for t, keys in part for ns, cid in keys])
    return {t: store.delete_checkpoints(t, keys) for t, keys in part}
