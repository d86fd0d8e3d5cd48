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
:func:`outbox`            outbox entry: pending, synced or quarantined, with the plane's reason
:func:`backlog`           instant of a time grid: rows pending then, age of the oldest
:func:`retention`         thread, as :func:`durability.sweep.plan_sweep` would treat it
:func:`parks`             pending park: deadline and time left
:func:`runs`              run (local run health); :func:`plane_runs` the same from a plane
========================  ===================================================================

Column notes:

* ``threads.max_idle_gap``: the longest time between two consecutive checkpoints of the thread
  (write order, all namespaces); ``NaT`` with fewer than two. ``status`` is the newest
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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

from durability._extras import missing_extra

try:
    import numpy as np
    import pandas as pd
except ModuleNotFoundError as exc:  # the notebook extra
    raise missing_extra(exc, "durability.frames") from exc

from durability.clock import as_utc
from durability.errors import CapabilityError, ConfigError
from durability.model import FAILED, INTERRUPTED, STEP_NODE, STEP_RUN_END
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.stores.scans import CHECKPOINT_COLUMNS, OUTBOX_COLUMNS, THREAD_COLUMNS, Columns
from durability.sweep import PLAN_COLUMNS, plan_sweep

if TYPE_CHECKING:
    from durability.settings import Settings

_TIME: Final = "datetime64[ns, UTC]"
_SPAN: Final = "timedelta64[ns]"

#: Every frame's columns and their dtypes: frame name -> column -> dtype (as ``str(dtype)``).
COLUMNS: dict[str, dict[str, str]] = {
    "checkpoints": {
        "thread_id": "string",
        "namespace": "string",
        "run_id": "string",
        "checkpoint_id": "string",
        "seq": "Int64",
        "node_id": "string",
        "step": "Int64",
        "step_type": "string",
        "status": "category",
        "created_at": _TIME,
        "size_bytes": "int64",
        "synced": "boolean",
        "sync_error": "string",
    },
    "threads": {
        "thread_id": "string",
        "owner": "string",
        "run_id": "string",
        "status": "category",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "first_at": _TIME,
        "newest_at": _TIME,
        "started_at": _TIME,
        "finished_at": _TIME,
        "due_at": _TIME,
        "declared_waiting": _SPAN,
        "declared_finished": _SPAN,
        "max_idle_gap": _SPAN,
        "lease_holder": "string",
        "lease_expires_at": _TIME,
        "parked": "bool",
        "park_deadline": _TIME,
        "unreplicated": "int64",
    },
    "outbox": {
        "thread_id": "string",
        "namespace": "string",
        "checkpoint_id": "string",
        "seq": "Int64",
        "project_id": "string",
        "created_at": _TIME,
        "synced_at": _TIME,
        "size_bytes": "int64",
        "state": "category",
        "attempts": "int64",
        "last_error": "string",
        "sync_error": "string",
        "age": _SPAN,
    },
    "backlog": {
        "time": _TIME,
        "pending": "int64",
        "oldest_pending_age": _SPAN,
    },
    "parks": {
        "thread_id": "string",
        "run_id": "string",
        "node_id": "string",
        "reason": "string",
        "created_at": _TIME,
        "deadline": _TIME,
        "deadline_source": "string",
        "time_left": _SPAN,
        "expired": "bool",
    },
    "retention": dict(PLAN_COLUMNS),
    "runs": {
        "run_id": "string",
        "thread_id": "string",
        "runner": "string",
        "status": "category",
        "started_at": _TIME,
        "ended_at": _TIME,
        "steps": "int64",
        "duration": _SPAN,
        "reason": "string",
        "error": "string",
    },
}

#: The extra column :func:`checkpoints` adds with ``decode_state=True``.
STATE_COLUMN = {"state": "object"}

#: The categories of ``outbox.state``.
OUTBOX_STATES = ("pending", "synced", "quarantined")

#: The categories of ``runs.status``.
RUN_STATUSES = ("completed", "failed", "parked", "running", "stalled", "abandoned")

_NAT = np.iinfo(np.int64).min


# ---------------------------------------------------------------------------- frames


def checkpoints(
    store: Store, *, thread_id: str | None = None, decode_state: bool = False
) -> pd.DataFrame:
    """One row per checkpoint (``COLUMNS["checkpoints"]``), in write order (``seq``).

    On Redis, whose ``seq`` counts per thread, rows of equal ``seq`` are in thread id order.

    Args:
        store: Any open store.
        thread_id: Only this thread's checkpoints.
        decode_state: Add a ``state`` column (object) with each checkpoint's decoded state;
            the only frame option that decodes a payload (it reads every thread's history).
    """
    names = CHECKPOINT_COLUMNS[:-1]  # all but runner
    cols = _collect(store.checkpoint_columns(thread_id, columns=names), names)
    frame = pd.DataFrame(
        {
            "thread_id": _strings(cols["thread_id"]),
            "namespace": _strings(cols["namespace"]),
            "run_id": _strings(cols["run_id"]),
            "checkpoint_id": _strings(cols["checkpoint_id"]),
            "seq": _nullable_ints(cols["seq"]),
            "node_id": _strings(cols["node_id"]),
            "step": _nullable_ints(cols["step"]),
            "step_type": _strings(cols["step_type"]),
            "status": _categories(cols["status"]),
            "created_at": _times(cols["created_at"]),
            "size_bytes": _ints(cols["size_bytes"]),
            "synced": _booleans(cols["synced"]),
            "sync_error": _strings(cols["sync_error"]),
        },
        copy=False,
    )
    frame = _in_write_order(frame)
    if decode_state:
        frame["state"] = _states(store, frame)
    return frame


def threads(store: Store, now: datetime | None = None) -> pd.DataFrame:
    """One row per thread (``COLUMNS["threads"]``), in thread id order.

    ``now`` (default: the store's clock) decides which leases are live and which parks unexpired;
    ``unreplicated`` is read from the outbox as it is (it does not depend on ``now``).
    """
    at = _now(store, now)
    cols = _collect(store.thread_columns(), THREAD_COLUMNS)
    at_us = _micros_of(at)
    lease_live = [e is not None and e > at_us for e in cols["lease_expires_at"]]
    pending = {p.thread_id: p.deadline for p in pending_parks(store)}
    deadlines = [pending.get(t) for t in cols["thread_id"]]
    missing = store.unreplicated() if store.replicates else {}
    frame = pd.DataFrame(
        {
            "thread_id": _strings(cols["thread_id"]),
            "owner": _strings(cols["owner"]),
            "run_id": _strings(
                [
                    r if r is not None else n
                    for r, n in zip(cols["run_id"], cols["newest_run_id"], strict=True)
                ]
            ),
            "status": _categories(cols["status"]),
            "checkpoints": _ints(cols["checkpoints"]),
            "size_bytes": _ints(cols["size_bytes"]),
            "first_at": _times(cols["first_at"]),
            "newest_at": _times(cols["newest_at"]),
            "started_at": _times(cols["started_at"]),
            "finished_at": _times(cols["finished_at"]),
            "due_at": _times(cols["due_at"]),
            "declared_waiting": _spans(cols["declared_waiting"]),
            "declared_finished": _spans(cols["declared_finished"]),
            "max_idle_gap": _spans(cols["max_idle_gap"]),
            "lease_holder": _strings(
                [
                    h if live else None
                    for h, live in zip(cols["lease_holder"], lease_live, strict=True)
                ]
            ),
            "lease_expires_at": _times(
                [
                    e if live else None
                    for e, live in zip(cols["lease_expires_at"], lease_live, strict=True)
                ]
            ),
            "parked": np.array([d is not None and d > at for d in deadlines], dtype=bool),
            "park_deadline": _times([_micros_of(d) if d is not None else None for d in deadlines]),
            "unreplicated": _ints([missing.get(t, 0) for t in cols["thread_id"]]),
        }
    )
    return _in_order(frame, ["thread_id"])


def outbox(store: Store, now: datetime | None = None) -> pd.DataFrame:
    """One row per outbox entry (``COLUMNS["outbox"]``), oldest first; empty if the store keeps none.

    ``state`` is ``pending``, ``synced`` or ``quarantined`` (``sync_error`` then holds the
    plane's explanation); ``age`` is measured at ``now`` (default: the store's clock).
    """
    at = _now(store, now)
    cols = _outbox_cols(store)
    created = _times(cols["created_at"])
    synced_at = _times(cols["synced_at"])
    synced = np.array(cols["synced"], dtype=bool).reshape(-1)
    quarantined = synced & np.array([e is not None for e in cols["sync_error"]], dtype=bool)
    state = np.where(synced, np.where(quarantined, "quarantined", "synced"), "pending")
    age = pd.Series(synced_at, copy=False).where(
        pd.Series(synced, copy=False), pd.Timestamp(at)
    ) - pd.Series(created, copy=False)
    frame = pd.DataFrame(
        {
            "thread_id": _strings(cols["thread_id"]),
            "namespace": _strings(cols["namespace"]),
            "checkpoint_id": _strings(cols["checkpoint_id"]),
            "seq": _nullable_ints(cols["seq"]),
            "project_id": _strings(cols["project_id"]),
            "created_at": created,
            "synced_at": synced_at,
            "size_bytes": _ints(cols["size_bytes"]),
            "state": pd.Categorical(state, categories=OUTBOX_STATES),
            "attempts": _ints(cols["attempts"]),
            "last_error": _strings(cols["last_error"]),
            "sync_error": _strings(cols["sync_error"]),
            "age": age.astype(_SPAN).array,
        }
    )
    return _in_order(frame, ["created_at", "thread_id", "seq"])


def backlog(
    store: Store,
    freq: str = "1h",
    start: datetime | None = None,
    end: datetime | None = None,
) -> pd.DataFrame:
    """The outbox backlog over time (``COLUMNS["backlog"]``): one row per instant of a grid.

    The grid runs every ``freq`` (a pandas offset such as ``"15min"``, ``"1h"``, ``"1D"``)
    from ``start`` (default: the oldest row's ``created_at``, floored to ``freq``) to ``end``
    (default: the store's clock). ``pending`` counts the rows pending at each instant (written,
    not yet taken or refused by the plane); ``oldest_pending_age`` is the age of the oldest of
    them (``NaT`` when none). Empty when the store keeps no outbox, or holds no rows and no
    ``start`` is given.
    """
    if not _keeps_outbox(store):
        return _empty("backlog")
    cols = _outbox_cols(store)
    created = _ns(cols["created_at"])
    left = _ns(cols["synced_at"])
    synced = np.array(cols["synced"], dtype=bool)
    # Synced with no recorded time: when it stopped pending is unknown, so it never counts.
    keep = ~(synced & (left == _NAT))
    created, left = created[keep], left[keep]
    left = np.where(left == _NAT, np.iinfo(np.int64).max, left)
    if start is None and not len(created):
        return _empty("backlog")
    try:
        first = (
            pd.Timestamp(as_utc(start))
            if start is not None
            else pd.Timestamp(int(created.min()), tz="UTC").floor(freq)
        )
        last = pd.Timestamp(as_utc(end if end is not None else store.clock()))
        grid = pd.date_range(first, last, freq=freq)
    except ValueError as exc:
        raise ConfigError(
            f"cannot build the backlog frame: freq={freq!r} is not a pandas frequency "
            f"({exc}); use one such as '15min', '1h' or '1D'"
        ) from exc
    instants = grid.as_unit("ns").asi8
    pending, oldest = _pending_at(created, left, instants)
    age = np.where(oldest == _NAT, _NAT, instants - oldest)
    return pd.DataFrame(
        {
            "time": _times((instants // 1000).tolist()),
            "pending": pending.astype("int64"),
            "oldest_pending_age": pd.array(cast(Any, age.view("m8[ns]")), dtype=_SPAN),
        }
    )


def retention(
    store: Store, settings: Settings | None = None, now: datetime | None = None
) -> pd.DataFrame:
    """The rows of :func:`durability.sweep.plan_sweep` (``COLUMNS["retention"]``): one per thread.

    Each row says what a sweep at ``now`` (default: the store's clock) with ``settings``
    (default: the store's) would do with the thread — ``delete``, ``spared`` (a live park,
    lease or unreplicated rows, named in ``owner``), ``not_due`` or ``skipped`` — and why.
    Nothing is deleted.
    """
    return plan_sweep(store, settings, now).to_frame()


def parks(store: Store, now: datetime | None = None) -> pd.DataFrame:
    """One row per pending park (``COLUMNS["parks"]``), earliest deadline first.

    ``time_left`` is ``deadline - now`` (default: the store's clock), negative once expired.
    """
    at = _now(store, now)
    found = pending_parks(store)
    deadline = _times([_micros_of(p.deadline) for p in found])
    time_left = pd.Series(deadline, copy=False) - pd.Timestamp(at)
    frame = pd.DataFrame(
        {
            "thread_id": _strings([p.thread_id for p in found]),
            "run_id": _strings([p.run_id for p in found]),
            "node_id": _strings([p.node_id for p in found]),
            "reason": _strings([p.reason for p in found]),
            "created_at": _times(
                [None if p.created_at is None else _micros_of(p.created_at) for p in found]
            ),
            "deadline": deadline,
            "deadline_source": _strings([p.deadline_source for p in found]),
            "time_left": time_left.astype(_SPAN).array,
            "expired": (time_left <= pd.Timedelta(0)).to_numpy(dtype=bool),
        }
    )
    return _in_order(frame, ["deadline", "thread_id"])


def runs(store: Store) -> pd.DataFrame:
    """Run health of a store (``COLUMNS["runs"]``): one row per run, by thread then start.

    Read from the checkpoints' scalar fields plus, for failed run ends only, their recorded
    error; parks and live leases (at the store's clock) tell parked and running runs apart.
    """
    names: tuple[str, ...] = ("thread_id", "namespace", "run_id", "checkpoint_id", "seq")
    names += ("step_type", "status", "created_at", "runner")
    cols = _collect(store.checkpoint_columns(columns=names), names)
    now_us = _micros_of(store.clock())
    leased = [
        thread_id
        for chunk in store.thread_columns()
        for thread_id, expires in zip(chunk["thread_id"], chunk["lease_expires_at"], strict=True)
        if expires is not None and expires > now_us
    ]
    lease_runs = _lease_runs(store, leased)
    parked = {p.thread_id: (p.run_id, p.checkpoint_id) for p in pending_parks(store)}
    rows = [
        dict(zip(names, values, strict=True))
        for values in zip(*(cols[n].tolist() for n in names), strict=True)
    ]
    failed = [
        (r["thread_id"], r["namespace"], r["checkpoint_id"])
        for r in rows
        if r["step_type"] == STEP_RUN_END and r["status"] == FAILED
    ]
    ends = {
        key[0] + "\x00" + key[2]: out
        for key, out in store.run_end_outputs(failed).items()
        if isinstance(out, Mapping)
    }
    return _runs_frame(rows, parked, lease_runs, ends, interrupted_is_parked=False)


def plane_runs(connection: Any) -> pd.DataFrame:
    """Run health read from a plane (``COLUMNS["runs"]``), through its API.

    ``connection`` is a :class:`durability.replication.connection.Connection` (or its
    :class:`~durability.replication.client.PlaneClient`). The plane's ``GET /public/v1/runs``
    lists the executions (threads) it holds, with the health of each one's latest row; it has
    no per-run route, so each execution's checkpoints are read from its history
    (``GET /public/v1/checkpoints/{id}``, headers and metadata only) and grouped into runs as
    :func:`runs` does. The plane knows no leases: an unfinished run that is its thread's latest
    reads ``stalled`` even while a worker runs it. A plane that serves no history gives one row
    per execution from its health: ``run_id`` is the execution id, ``steps`` the latest row's
    step index.
    """
    client = getattr(connection, "client", connection)
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = client.runs(limit=100, cursor=cursor)
        for summary in page.get("items") or []:
            items = client.iter_history(summary["execution_id"])
            if items is None:
                summaries.append(summary)
            else:
                rows += [_wire_row(item) for item in items]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    ends = {
        r["thread_id"] + "\x00" + r["checkpoint_id"]: end
        for r in rows
        if (end := r.pop("end")) is not None
    }
    frame = _runs_frame(rows, {}, {}, ends, interrupted_is_parked=True)
    if summaries:
        frame = pd.concat([frame, _health_rows(summaries)], ignore_index=True)
        frame["status"] = frame["status"].astype(pd.CategoricalDtype(list(RUN_STATUSES)))
    return frame


# ---------------------------------------------------------------------------- runs


def _lease_runs(store: Store, leased: list[str]) -> dict[str, str]:
    """Thread -> the run id its live lease was taken for (a few threads: one read each)."""
    found = {}
    for thread_id in leased:
        record = store.thread(thread_id)
        if record is not None and record.lease is not None:
            found[thread_id] = record.lease.run_id
    return found


def _runs_frame(
    rows: list[dict[str, Any]],
    parked: Mapping[str, tuple[str, str]],
    leases: Mapping[str, str],
    ends: Mapping[str, Mapping[str, Any]],
    *,
    interrupted_is_parked: bool,
) -> pd.DataFrame:
    """Group checkpoint rows (write order within each thread) into runs, as ``list_runs`` does.

    ``ends`` holds the record (``run_reason``, ``run_error``) of the failed run ends, keyed by
    thread id and checkpoint id joined with NUL.

    ``interrupted_is_parked``: a plane knows no parks, so an unfinished run whose last row is
    its thread's latest and ``interrupted`` reads as parked there.
    """
    runs_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["thread_id"], r["seq"])):
        runs_of.setdefault((row["thread_id"], row["run_id"]), []).append(row)
        latest[row["thread_id"]] = row
    out: dict[str, list[Any]] = {name: [] for name in COLUMNS["runs"]}
    for (thread_id, run_id), members in runs_of.items():
        last = members[-1]
        ended = last["step_type"] == STEP_RUN_END
        if ended:
            status = FAILED if last["status"] == FAILED else "completed"
        elif parked.get(thread_id) == (run_id, last["checkpoint_id"]) or (
            interrupted_is_parked and last["status"] == INTERRUPTED and latest[thread_id] is last
        ):
            status = "parked"
        elif leases.get(thread_id) == run_id:
            status = "running"
        else:
            status = "stalled" if latest[thread_id] is last else "abandoned"
        started = members[0]["created_at"]
        end = ends.get(thread_id + "\x00" + last["checkpoint_id"], {}) if ended else {}
        reason, error = end.get("run_reason"), end.get("run_error")
        out["run_id"].append(run_id)
        out["thread_id"].append(thread_id)
        out["runner"].append(last["runner"])
        out["status"].append(status)
        out["started_at"].append(started)
        out["ended_at"].append(last["created_at"] if ended else None)
        out["steps"].append(sum(1 for m in members if m["step_type"] == STEP_NODE))
        out["duration"].append(
            last["created_at"] - started
            if ended and started is not None and last["created_at"] is not None
            else None
        )
        out["reason"].append(None if reason is None else str(reason))
        out["error"].append(None if error is None else str(error))
    return pd.DataFrame(
        {
            "run_id": _strings(out["run_id"]),
            "thread_id": _strings(out["thread_id"]),
            "runner": _strings(out["runner"]),
            "status": pd.Categorical(out["status"], categories=RUN_STATUSES),
            "started_at": _times(out["started_at"]),
            "ended_at": _times(out["ended_at"]),
            "steps": _ints(out["steps"]),
            "duration": _spans(out["duration"]),
            "reason": _strings(out["reason"]),
            "error": _strings(out["error"]),
        }
    )


def _wire_row(item: Mapping[str, Any]) -> dict[str, Any]:
    """A plane history item's scalar fields (no payload decoded; a run end's reason and error
    read as sent)."""
    raw = item.get("metadata")
    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
    found = metadata.get("durability")
    extension: dict[str, Any] | None = found if isinstance(found, dict) else None
    created = pd.Timestamp(item["created_at"]) if item.get("created_at") else None
    if created is not None and created.tzinfo is None:
        created = created.tz_localize("UTC")
    output = metadata.get("node_output")
    end = (
        {k: output.get(k) for k in ("run_reason", "run_error")}
        if isinstance(output, dict)
        else None
    )
    if extension is not None:
        run_id, status = str(extension.get("run_id") or ""), extension.get("status")
    else:  # an item the fastaiagent SDK sent: its execution is one run
        run_id, status = item["execution_id"], None
    return {
        "thread_id": item["execution_id"],
        "run_id": run_id,
        "checkpoint_id": item.get("checkpoint_id") or "",
        "seq": int(item.get("sequence") or 0),
        "step_type": item.get("step_type"),
        "status": status or item.get("status") or "completed",
        "created_at": None if created is None else int(created.value // 1000),
        "runner": str(
            metadata.get("chain_name") or item.get("agent_id") or item.get("chain_id") or ""
        ),
        "end": end,
    }


def _health_rows(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    statuses = {"completed": "completed", "failed": "failed", "interrupted": "parked"}
    ended = [s.get("health") in ("completed", "failed") for s in summaries]
    last = [
        int(pd.Timestamp(s["last_created_at"]).value // 1000) if s.get("last_created_at") else None
        for s in summaries
    ]
    return pd.DataFrame(
        {
            "run_id": _strings([s["execution_id"] for s in summaries]),
            "thread_id": _strings([s["execution_id"] for s in summaries]),
            "runner": _strings(
                [str(s.get("agent_id") or s.get("chain_id") or "") for s in summaries]
            ),
            "status": pd.Categorical(
                [statuses.get(s.get("health") or "", "stalled") for s in summaries],
                categories=RUN_STATUSES,
            ),
            "started_at": _times([None] * len(summaries)),
            "ended_at": _times([t if e else None for t, e in zip(last, ended, strict=True)]),
            "steps": _ints([int(s.get("step_index") or 0) for s in summaries]),
            "duration": _spans([None] * len(summaries)),
            "reason": _strings([None] * len(summaries)),
            "error": _strings([None] * len(summaries)),
        }
    )


# ---------------------------------------------------------------------------- helpers


def _collect(chunks: Iterable[Columns], names: Sequence[str]) -> Columns:
    """Concatenate the store's column chunks (numpy object arrays) into one array per column."""
    parts: dict[str, list[Any]] = {name: [] for name in names}
    for chunk in chunks:
        for name in names:
            parts[name].append(chunk[name])
    return {name: _joined(found) for name, found in parts.items()}


def _joined(parts: list[Any]) -> Any:
    if not parts:
        return np.empty(0, dtype=object)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _outbox_cols(store: Store) -> Columns:
    try:
        return _collect(store.outbox_columns(), OUTBOX_COLUMNS)
    except CapabilityError:  # a store without an outbox does not replicate: nothing is pending
        return {name: np.empty(0, dtype=object) for name in OUTBOX_COLUMNS}


def _keeps_outbox(store: Store) -> bool:
    return store.outbox is not None


def _now(store: Store, now: datetime | None) -> datetime:
    return as_utc(now) if now is not None else store.clock()


def _micros_of(value: datetime) -> int:
    from durability.clock import to_micros

    return to_micros(value)


def _strings(values: Sequence[Any]) -> Any:
    return pd.array(np.asarray(values, dtype=object), dtype="string")


def _booleans(values: Sequence[Any]) -> Any:
    # SQLite answers 0/1 for a boolean column.
    return pd.array([None if v is None else bool(v) for v in values], dtype="boolean")


def _ints(values: Sequence[int]) -> np.ndarray[Any, Any]:
    return np.asarray(values, dtype="int64")


def _nullable_ints(values: Sequence[int | None]) -> Any:
    raw = np.asarray(values, dtype=object)
    missing = pd.isna(raw)
    ints = np.where(missing, 0, raw).astype(np.int64) if missing.any() else raw.astype(np.int64)
    return pd.arrays.IntegerArray(ints, missing)


def _categories(values: Sequence[str | None]) -> pd.Categorical:
    return pd.Categorical(np.asarray(values, dtype=object))


def _ns(values: Sequence[int | None]) -> np.ndarray[Any, Any]:
    """Microseconds (``None`` allowed) as int64 nanoseconds, ``None`` as NaT's integer."""
    raw = np.asarray(values, dtype=object)
    try:  # the common case, nothing missing: one cast
        return raw.astype(np.int64) * 1000
    except TypeError:
        pass
    missing = pd.isna(raw)
    ns = np.where(missing, 0, raw).astype(np.int64) * 1000
    ns[missing] = _NAT
    return ns


def _times(values: Sequence[int | None]) -> Any:
    return pd.array(cast(Any, _ns(values).view("M8[ns]")), dtype="datetime64[ns]").tz_localize(
        "UTC"
    )


def _spans(values: Sequence[int | None]) -> Any:
    return pd.array(cast(Any, _ns(values).view("m8[ns]")), dtype=_SPAN)


def _in_write_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows by ``seq``, ties (Redis counts ``seq`` per thread) by thread id.

    SQL and memory stores already answer in ``seq`` order, which is checked, not sorted again.
    """
    seq = frame["seq"].to_numpy(dtype="int64", na_value=0)
    if len(seq) < 2 or bool((seq[1:] > seq[:-1]).all()):
        return frame.reset_index(drop=True)
    codes, _ = pd.factorize(frame["thread_id"], sort=True)
    return frame.take(np.lexsort((codes, seq))).reset_index(drop=True)


def _in_order(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    if len(frame) < 2:
        return frame.reset_index(drop=True)
    return frame.sort_values(by, kind="stable", ignore_index=True)


def _empty(name: str) -> pd.DataFrame:
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in COLUMNS[name].items()})


def _pending_at(
    created: np.ndarray[Any, Any], left: np.ndarray[Any, Any], instants: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows pending at each instant (``created <= t < left``) and the oldest one's ``created``.

    Counting is a difference of two sorted searches. The oldest: each row covers a run of
    instants; walking rows oldest first, a row fills the instants of its run still unfilled
    (a next-unfilled pointer with path halving keeps it near linear).
    """
    first = np.searchsorted(instants, created, side="left")
    stop = np.searchsorted(instants, left, side="left")
    pending = np.searchsorted(np.sort(created), instants, side="right") - np.searchsorted(
        np.sort(left), instants, side="right"
    )
    oldest = np.full(len(instants), _NAT, dtype=np.int64)
    covering = np.flatnonzero(stop > first)
    nxt = list(range(len(instants) + 1))

    def find(i: int) -> int:
        while nxt[i] != i:
            nxt[i] = nxt[nxt[i]]
            i = nxt[i]
        return i

    for row in covering[np.argsort(created[covering], kind="stable")]:
        i = find(int(first[row]))
        end = int(stop[row])
        while i < end:
            oldest[i] = created[row]
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


__all__ = [
    "COLUMNS",
    "OUTBOX_STATES",
    "RUN_STATUSES",
    "STATE_COLUMN",
    "backlog",
    "checkpoints",
    "outbox",
    "parks",
    "plane_runs",
    "retention",
    "runs",
    "threads",
]
