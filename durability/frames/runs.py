"""Frames of runs: every run of a store with its status, and the plane's fleet run health."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from durability.errors import ConfigError
from durability.frames.columns import (
    COLUMNS,
    RUN_STATUSES,
    collect,
    ints,
    micros_of,
    spans,
    strings,
    times,
)
from durability.model import FAILED, INTERRUPTED, STEP_NODE, STEP_RUN_END
from durability.stores.base import Store
from durability.stores.parks import pending_parks
from durability.vocabulary import STATUS_WORDS

if TYPE_CHECKING:
    pass


def runs(
    store: Store, *, sample: int | None = None, seed: int = 0, threads: int | None = None
) -> pd.DataFrame:
    """Run health of a store (``COLUMNS["runs"]``): one row per run, by thread then start.

    Read from the checkpoints' scalar fields plus, for failed run ends only, their recorded
    error; parks and live leases (at the store's clock) tell parked and running runs apart.

    ``sample``: a store holding more threads than that gives the runs of about ``sample``
    threads picked at random (``seed`` fixes the pick; a thread with more checkpoints is more
    likely picked), read thread by thread, never the whole store; ``attrs["sample"]`` then says
    ``{"threads": picked, "of": threads in the store}``, for the chart to say it is a sample.
    ``threads``: how many threads the store holds when already counted (e.g. the sum of
    :func:`~durability.frames.owners`), so the sample does not count them again.
    """
    names: tuple[str, ...] = ("thread_id", "namespace", "run_id", "checkpoint_id", "seq")
    names += ("step_type", "status", "created_at", "runner")
    picked, total = _sampled_threads(store, sample, seed, threads)
    if picked is None:
        cols = collect(store.checkpoint_columns(columns=names), names, whole="runs")
        leased = _leased(store)
    else:
        chunks = (c for t in picked for c in store.checkpoint_columns(t, columns=names))
        cols = collect(chunks, names)
        leased = store.scans.live_leases(picked, store.clock())
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
    frame = _runs_frame(rows, parked, lease_runs, ends, interrupted_is_parked=False)
    if picked is not None:
        frame.attrs["sample"] = {"threads": len(picked), "of": total}
    return frame


def _sampled_threads(
    store: Store, sample: int | None, seed: int, threads: int | None
) -> tuple[list[str] | None, int | None]:
    """The threads of a sample (``None``: every thread) and how many the store holds."""
    if sample is None:
        return None, None
    if sample < 1:
        raise ConfigError(f"cannot sample the runs of {sample} threads: sample at least 1")
    total = sum(store.scans.owner_groups()["threads"]) if threads is None else threads
    if total <= sample:
        return None, total
    picked = {address[0] for address in store.scans.sample_checkpoints(sample, seed)}
    return sorted(picked), total


def _leased(store: Store) -> list[str]:
    """Every thread holding a live lease at the store's clock (a whole-store read)."""
    now_us = micros_of(store.clock())
    return [
        thread_id
        for chunk in store.thread_columns()
        for thread_id, expires in zip(chunk["thread_id"], chunk["lease_expires_at"], strict=True)
        if expires is not None and expires > now_us
    ]


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
        newest = latest[thread_id] is last
        if ended:
            status = FAILED if last["status"] == FAILED else "completed"
        elif parked.get(thread_id) == (run_id, last["checkpoint_id"]) or (
            interrupted_is_parked and last["status"] == INTERRUPTED and newest
        ):
            status = "parked"
        else:
            status = "running" if leases.get(thread_id) == run_id else _unfinished(newest)
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
    return _typed_runs(out)


def _unfinished(newest: bool) -> str:
    """A run neither ended, parked nor running: ``stalled`` while it holds the thread's newest
    row (a resume continues it), else ``abandoned`` (a later run wrote after it)."""
    return "stalled" if newest else "abandoned"


def _typed_runs(out: dict[str, list[Any]]) -> pd.DataFrame:
    """The runs frame's columns, typed."""
    return pd.DataFrame(
        {
            "run_id": strings(out["run_id"]),
            "thread_id": strings(out["thread_id"]),
            "runner": strings(out["runner"]),
            "status": pd.Categorical(out["status"], categories=RUN_STATUSES),
            "started_at": times(out["started_at"]),
            "ended_at": times(out["ended_at"]),
            "steps": ints(out["steps"]),
            "duration": spans(out["duration"]),
            "reason": strings(out["reason"]),
            "error": strings(out["error"]),
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
    ended = [s.get("health") in ("completed", "failed") for s in summaries]
    last = [
        int(pd.Timestamp(s["last_created_at"]).value // 1000) if s.get("last_created_at") else None
        for s in summaries
    ]
    return pd.DataFrame(
        {
            "run_id": strings([s["execution_id"] for s in summaries]),
            "thread_id": strings([s["execution_id"] for s in summaries]),
            "runner": strings(
                [str(s.get("agent_id") or s.get("chain_id") or "") for s in summaries]
            ),
            "status": pd.Categorical(
                [STATUS_WORDS.get(s.get("health") or "", "stalled") for s in summaries],
                categories=RUN_STATUSES,
            ),
            "started_at": times([None] * len(summaries)),
            "ended_at": times([t if e else None for t, e in zip(last, ended, strict=True)]),
            "steps": ints([int(s.get("step_index") or 0) for s in summaries]),
            "duration": spans([None] * len(summaries)),
            "reason": strings([None] * len(summaries)),
            "error": strings([None] * len(summaries)),
        }
    )
