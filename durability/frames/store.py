"""Frames of a store's own records: checkpoints, threads, the outbox and its backlog over time,
the retention plan, and parks.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from durability.clock import as_utc, to_micros
from durability.errors import CapabilityError, ConfigError
from durability.frames.columns import (
    COLUMNS,
    NAT,
    OUTBOX_STATES,
    SPAN,
    booleans,
    check_cap,
    collect,
    empty,
    in_order,
    in_write_order,
    ints,
    micros_of,
    moment,
    nullable_ints,
    spans,
    statuses,
    strings,
    times,
)
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.stores.scans import CHECKPOINT_COLUMNS, OUTBOX_COLUMNS, THREAD_COLUMNS, Columns
from durability.sweep import plan_sweep

if TYPE_CHECKING:
    from durability.settings import Settings


def checkpoints(
    store: Store,
    *,
    thread_id: str | None = None,
    decode_state: bool = False,
    encryption: bool = False,
) -> pd.DataFrame:
    """One row per checkpoint (``COLUMNS["checkpoints"]``), in write order (``seq``).

    On Redis, whose ``seq`` counts per thread, rows of equal ``seq`` are in thread id order.

    Args:
        store: Any open store.
        thread_id: Only this thread's checkpoints.
        decode_state: Add a ``state`` column (object) with each checkpoint's decoded state;
            the only frame option that decodes a payload (it reads every thread's history).
        encryption: Add ``encrypted`` and ``key_id`` (from the envelopes' clear headers; no
            key needed).
    """
    names = CHECKPOINT_COLUMNS[:-1]  # all but runner
    whole = "checkpoints" if thread_id is None else None
    cols = collect(store.checkpoint_columns(thread_id, columns=names), names, whole=whole)
    frame = pd.DataFrame(
        {
            "thread_id": strings(cols["thread_id"]),
            "namespace": strings(cols["namespace"]),
            "run_id": strings(cols["run_id"]),
            "checkpoint_id": strings(cols["checkpoint_id"]),
            "seq": nullable_ints(cols["seq"]),
            "node_id": strings(cols["node_id"]),
            "step": nullable_ints(cols["step"]),
            "step_type": strings(cols["step_type"]),
            "status": statuses(cols["status"]),
            "created_at": times(cols["created_at"]),
            "size_bytes": ints(cols["size_bytes"]),
            "synced": booleans(cols["synced"]),
            "sync_error": strings(cols["sync_error"]),
        },
        copy=False,
    )
    frame = in_write_order(frame)
    if decode_state:
        frame["state"] = _states(store, frame)
    if encryption:
        from durability.frames.encryption import with_checkpoint_keys

        frame = with_checkpoint_keys(store, frame, thread_id)
    return frame


def threads(
    store: Store,
    now: datetime | None = None,
    *,
    encryption: bool = False,
    lean: bool = False,
) -> pd.DataFrame:
    """One row per thread (``COLUMNS["threads"]``), in thread id order.

    ``now`` (default: the store's clock) decides which leases are live and which parks unexpired;
    ``unreplicated`` is read from the outbox as it is (it does not depend on ``now``).
    ``encryption=True`` adds ``encrypted`` (every row sealed) and ``key_id`` (the newest row's).
    ``lean=True`` leaves out the columns that cost a SQL store reads of their own:
    ``max_idle_gap`` (a pass over every checkpoint; :func:`idle_gaps` measures it for a sample
    of the frame's threads), ``status`` and ``run_id`` (each thread's newest row): every
    retention simulation reads the rest.
    """
    at = moment(store, now)
    cols = collect(store.thread_columns(lean=lean), THREAD_COLUMNS, whole="threads")
    at_us = micros_of(at)
    live = np.array([e is not None and e > at_us for e in cols["lease_expires_at"]], dtype=bool)
    pending = {p.thread_id: p.deadline for p in pending_parks(store)}
    deadlines = [pending.get(t) for t in cols["thread_id"]]
    missing = store.unreplicated() if store.replicates else {}
    no_run = cols["run_id"] == None  # noqa: E711 - elementwise on an object array
    frame = pd.DataFrame(
        {
            "thread_id": strings(cols["thread_id"]),
            "owner": strings(cols["owner"]),
            "checkpoints": ints(cols["checkpoints"]),
            "size_bytes": ints(cols["size_bytes"]),
            "first_at": times(cols["first_at"]),
            "newest_at": times(cols["newest_at"]),
            "started_at": times(cols["started_at"]),
            "finished_at": times(cols["finished_at"]),
            "due_at": times(cols["due_at"]),
            "declared_waiting": spans(cols["declared_waiting"]),
            "declared_finished": spans(cols["declared_finished"]),
            "lease_holder": strings(np.where(live, cols["lease_holder"], None)),
            "lease_expires_at": times(cast(Any, np.where(live, cols["lease_expires_at"], None))),
            "parked": np.array([d is not None and d > at for d in deadlines], dtype=bool),
            "park_deadline": times([micros_of(d) if d is not None else None for d in deadlines]),
            "unreplicated": ints([missing.get(t, 0) for t in cols["thread_id"]]),
        }
    )
    if not lean:
        frame["run_id"] = strings(np.where(no_run, cols["newest_run_id"], cols["run_id"]))
        frame["status"] = statuses(cols["status"])
        frame["max_idle_gap"] = spans(cols["max_idle_gap"])
    frame = frame[[c for c in COLUMNS["threads"] if c in frame]]
    if encryption:
        from durability.frames.encryption import with_thread_keys

        frame = with_thread_keys(store, frame)
    return in_order(frame, ["thread_id"])


def idle_gaps(
    store: Store, threads: pd.DataFrame, *, sample: int | None = 1000, seed: int = 0
) -> pd.DataFrame:
    """The rows of ``threads`` (a :func:`threads` frame, lean or not) with each thread's longest
    idle gap measured, for about ``sample`` of them picked at random (``seed`` fixes the pick;
    ``None``, or a frame of no more threads: every one).

    Each picked thread's write times are read by its id, so the cost follows the sample, never
    the store; the gaps are :func:`threads`'s ``max_idle_gap`` (write order, all namespaces;
    ``NaT`` with fewer than two checkpoints). ``attrs["sample"]`` is ``{"threads": picked,
    "of": rows of threads}`` for a sample, else ``None``: a chart of it says it is a sample.
    """
    if sample is not None and sample < 1:
        raise ConfigError(f"cannot sample idle gaps: sample={sample} must be at least 1")
    picked = threads
    if sample is not None and sample < len(threads):
        rows = np.random.default_rng(seed).choice(len(threads), sample, replace=False)
        picked = threads.iloc[np.sort(rows)]
    gaps = spans([_longest_gap(store, str(t)) for t in picked["thread_id"]])
    frame = picked.reset_index(drop=True)
    if "max_idle_gap" in frame:
        frame["max_idle_gap"] = gaps
    else:  # where frames.threads puts it
        before = list(COLUMNS["threads"])[: list(COLUMNS["threads"]).index("max_idle_gap")]
        frame.insert(sum(c in frame for c in before), "max_idle_gap", gaps)
    frame.attrs["sample"] = (
        None if picked is threads else {"threads": len(picked), "of": len(threads)}
    )
    return frame


def _longest_gap(store: Store, thread_id: str) -> int | None:
    """The longest time between two consecutive checkpoints of a thread (write order), in
    microseconds; ``None`` with fewer than two."""
    names = ("seq", "created_at")
    cols = collect(store.checkpoint_columns(thread_id, columns=names), names)
    seq, created = cols["seq"], cols["created_at"]
    if all(s is not None for s in seq):  # else the read's order, which is write order
        created = created[np.argsort(seq.astype(np.int64), kind="stable")]
    known = np.array([c for c in created if c is not None], dtype=np.int64)
    return int(np.diff(known).max()) if len(known) > 1 else None


def outbox(store: Store, now: datetime | None = None) -> pd.DataFrame:
    """One row per outbox entry (``COLUMNS["outbox"]``), oldest first; empty if the store keeps none.

    ``state`` is ``pending``, ``synced`` or ``quarantined`` (``sync_error`` then holds the
    plane's explanation); ``age`` is measured at ``now`` (default: the store's clock).
    """
    at = moment(store, now)
    cols = _outbox_cols(store, whole="outbox")
    created = times(cols["created_at"])
    synced_at = times(cols["synced_at"])
    synced = np.array(cols["synced"], dtype=bool).reshape(-1)
    quarantined = synced & np.array([e is not None for e in cols["sync_error"]], dtype=bool)
    state = np.where(synced, np.where(quarantined, "quarantined", "synced"), "pending")
    age = pd.Series(synced_at, copy=False).where(
        pd.Series(synced, copy=False), pd.Timestamp(at)
    ) - pd.Series(created, copy=False)
    frame = pd.DataFrame(
        {
            "thread_id": strings(cols["thread_id"]),
            "namespace": strings(cols["namespace"]),
            "checkpoint_id": strings(cols["checkpoint_id"]),
            "seq": nullable_ints(cols["seq"]),
            "project_id": strings(cols["project_id"]),
            "created_at": created,
            "synced_at": synced_at,
            "size_bytes": ints(cols["size_bytes"]),
            "state": pd.Categorical(state, categories=OUTBOX_STATES),
            "attempts": ints(cols["attempts"]),
            "last_error": strings(cols["last_error"]),
            "sync_error": strings(cols["sync_error"]),
            "age": age.astype(SPAN).array,
        }
    )
    return in_order(frame, ["created_at", "thread_id", "seq"])


def write_times(
    store: Store, *, width: str | None = None, last: timedelta | None = None
) -> pd.DataFrame:
    """Every checkpoint's write time and nothing else (``COLUMNS["write_times"]``), in the
    store's order: what :func:`durability.simulate.outage_backlog` replays, at 8 bytes a row
    where :func:`checkpoints` keeps a dozen columns of strings.

    A store of millions of rows: ``width`` (a fixed pandas duration such as ``"1min"``) counts
    the writes per bucket in the store (:meth:`~durability.stores.scans.Scans.checkpoint_buckets`)
    and gives each write its bucket's start, oldest first, without reading a row per checkpoint;
    ``last`` keeps only the writes of that long up to the newest one (with ``width``, counted
    in the store too). ``attrs["width"]`` is ``width``, for a chart to say so.
    """
    if width is None:
        cols = collect(store.checkpoint_columns(columns=("created_at",)), ("created_at",))
        frame = pd.DataFrame({"created_at": times(cols["created_at"])})
        if last is not None and len(frame):
            frame = frame[frame.created_at >= frame.created_at.max() - last].reset_index(drop=True)
    else:
        counted = store.scans.checkpoint_buckets(_fixed(width, "the write times"), last=last)
        at = np.repeat(np.array(counted["bucket"], dtype=np.int64), counted["checkpoints"])
        frame = pd.DataFrame({"created_at": times(at.tolist())})
    frame.attrs["width"] = width
    return frame


def activity(store: Store, width: str = "1D") -> pd.DataFrame:
    """Checkpoints written and their bytes per time bucket (``COLUMNS["activity"]``), counted
    in the store (:meth:`~durability.stores.scans.Scans.checkpoint_buckets`): one row per
    bucket of ``width`` (a pandas offset of fixed length: ``"1h"``, ``"1D"``) that holds a
    checkpoint. Its size follows the time the store spans, never its row count.
    """
    counted = store.scans.checkpoint_buckets(_fixed(width, "the activity frame"))
    return pd.DataFrame(
        {
            "time": times(counted["bucket"]),
            "checkpoints": ints(counted["checkpoints"]),
            "size_bytes": ints(counted["size_bytes"]),
        }
    )


def backlog(
    store: Store,
    freq: str = "1h",
    start: datetime | None = None,
    end: datetime | None = None,
) -> pd.DataFrame:
    """The outbox backlog over time (``COLUMNS["backlog"]``): one row per instant of a grid.

    The grid runs every ``freq`` (a pandas duration of fixed length such as ``"15min"``,
    ``"1h"``, ``"1D"``) from ``start`` (default: the oldest checkpoint's ``created_at``, or
    the start of the oldest released row's past span if older, floored to ``freq``) to ``end``
    (default: the store's clock). ``pending`` counts the rows pending at
    each instant (written, not yet taken or refused by the plane); ``oldest_pending_age`` is
    the age of the oldest of them (``NaT`` when none). Empty when the store keeps no outbox, or
    holds no checkpoint and no ``start`` is given.

    Built from what happened, so no later action changes a past instant: a row counts from its
    write (or its release back into the outbox, ``pending_since``) until the plane took or
    refused it, and the time a released row was pending before its quarantine comes from the
    outbox's history (:meth:`~durability.stores.outbox.Outbox.history`). Counted in the store
    on the grid (:meth:`~durability.stores.aggregates.Aggregates.pending_spans`): memory
    follows the grid, never the number of rows.
    """
    if not _keeps_outbox(store):
        return empty("backlog")
    try:
        step = pd.Timedelta(freq).value
    except ValueError as exc:
        raise ConfigError(
            f"cannot build the backlog frame: freq={freq!r} is not a fixed pandas duration "
            f"({exc}); use one such as '15min', '1h' or '1D'"
        ) from exc
    if step < 1000 or step % 1000:
        raise ConfigError(
            f"cannot build the backlog frame: freq={freq!r} is not a positive whole number of "
            "microseconds; use one such as '15min', '1h' or '1D'"
        )
    step //= 1000
    if start is not None:
        first = to_micros(as_utc(start))
    elif (written := store.scans.oldest_write()) is not None:
        first = written // step * step  # floored to freq, as pandas floors
    else:
        return empty("backlog")
    found = store.scans.pending_spans(step, first)
    last = to_micros(as_utc(end if end is not None else store.clock()))
    instants = np.arange(first, last + 1, step, dtype=np.int64) if last >= first else _NONE
    pending, oldest = _pending_on_grid(found, len(instants))
    age = np.where(oldest == NAT, NAT, (instants - np.where(oldest == NAT, 0, oldest)) * 1000)
    return pd.DataFrame(
        {
            "time": times(instants.tolist()),
            "pending": pending.astype("int64"),
            "oldest_pending_age": pd.array(cast(Any, age.view("m8[ns]")), dtype=SPAN),
        }
    )


def retention(
    store: Store, settings: Settings | None = None, now: datetime | None = None
) -> pd.DataFrame:
    """The rows of :func:`durability.sweep.plan_sweep` (``COLUMNS["retention"]``): one per thread.

    Each row says what a sweep at ``now`` (default: the store's clock) with ``settings``
    (default: the store's) would do with the thread — ``delete``, ``spared`` (a live park,
    lease or unreplicated rows, named in ``owner``), ``not_due`` or ``skipped`` — and why.
    Nothing is deleted. A plan of more threads than ``DURABILITY_FRAME_MAX_ROWS`` is refused:
    its ``groups()`` and ``to_frame(action=…, limit=N)`` answer at any size.
    """
    plan = plan_sweep(store, settings, now)
    check_cap("retention", plan.thread_count)
    return plan.to_frame()


def parks(store: Store, now: datetime | None = None) -> pd.DataFrame:
    """One row per pending park (``COLUMNS["parks"]``), earliest deadline first.

    ``time_left`` is ``deadline - now`` (default: the store's clock), negative once expired.
    """
    at = moment(store, now)
    found = pending_parks(store)
    deadline = times([micros_of(p.deadline) for p in found])
    time_left = pd.Series(deadline, copy=False) - pd.Timestamp(at)
    frame = pd.DataFrame(
        {
            "thread_id": strings([p.thread_id for p in found]),
            "run_id": strings([p.run_id for p in found]),
            "node_id": strings([p.node_id for p in found]),
            "reason": strings([p.reason for p in found]),
            "created_at": times(
                [None if p.created_at is None else micros_of(p.created_at) for p in found]
            ),
            "deadline": deadline,
            "deadline_source": strings([p.deadline_source for p in found]),
            "time_left": time_left.astype(SPAN).array,
            "expired": (time_left <= pd.Timedelta(0)).to_numpy(dtype=bool),
        }
    )
    return in_order(frame, ["deadline", "thread_id"])


def _fixed(width: str, what: str) -> timedelta:
    """``width`` as a fixed duration, or a ConfigError naming ``what`` could not be built."""
    try:
        return pd.Timedelta(width).to_pytimedelta()
    except ValueError as exc:
        raise ConfigError(
            f"cannot build {what}: width={width!r} is not a fixed pandas duration ({exc}); use "
            "one such as '1h' or '1D'"
        ) from exc


def _outbox_cols(store: Store, whole: str | None = None) -> Columns:
    try:
        return collect(store.outbox_columns(), OUTBOX_COLUMNS, whole=whole)
    except CapabilityError:  # a store without an outbox does not replicate: nothing is pending
        return {name: np.empty(0, dtype=object) for name in OUTBOX_COLUMNS}


def _keeps_outbox(store: Store) -> bool:
    return store.outbox is not None


#: No instant: the grid of a window that ends before it starts.
_NONE = np.empty(0, dtype=np.int64)


def _pending_on_grid(
    found: dict[str, list[Any]], count: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Spans pending at each of ``count`` instants and the oldest one's write time
    (microseconds, ``NAT`` when none), from :meth:`pending_spans`'s groups on a grid whose
    index 0 is the first instant.

    Counting is a difference array over the groups. The oldest: each group covers a run of
    instants; walking groups oldest write first, a group fills the instants of its run still
    unfilled (a next-unfilled pointer with path halving keeps it near linear).
    """
    runs = []
    for starts, ends, number, created in zip(
        found["starts"], found["ends"], found["spans"], found["oldest_created"], strict=True
    ):
        first = min(max(starts, 0), count)
        stop = count if ends is None else min(max(ends, 0), count)
        if stop > first:
            runs.append((created, first, stop, number))
    steps = np.zeros(count + 1, dtype=np.int64)
    for _, first, stop, number in runs:
        steps[first] += number
        steps[stop] -= number
    pending = np.cumsum(steps)[:count]
    oldest = np.full(count, NAT, dtype=np.int64)
    nxt = list(range(count + 1))

    def find(i: int) -> int:
        while nxt[i] != i:
            nxt[i] = nxt[nxt[i]]
            i = nxt[i]
        return i

    for created, first, stop, _ in sorted(runs, key=lambda run: run[0]):
        i = find(first)
        while i < stop:
            oldest[i] = created
            nxt[i] = i + 1
            i = find(i + 1)
    return pending, oldest


def _states(store: Store, frame: pd.DataFrame) -> list[Any]:
    """The decoded state of each row of a checkpoints frame (read thread by thread)."""
    states: dict[tuple[str, int], Any] = {}
    for thread_id in dict.fromkeys(frame["thread_id"].tolist()):
        for cp in _history(store, thread_id):
            states[(cp.thread_id, cp.seq or 0)] = cp.state
    return [
        states.get((t, int(s)))
        for t, s in zip(frame["thread_id"].tolist(), frame["seq"].tolist(), strict=True)
    ]


def _history(store: Store, thread_id: str) -> Iterator[Any]:
    after: int | None = None
    while True:
        page = store.history(thread_id, None, after_seq=after, limit=1000)
        yield from page
        if len(page) < 1000:
            return
        after = page[-1].seq
