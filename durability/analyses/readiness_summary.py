"""Restore readiness of a store of any size: per owner, and the threads that would not come back
whole, worst first — counted in the store, never one row per thread.

The same answers as :func:`~durability.analyses.readiness` summed by
:func:`~durability.analyses.readiness_by_owner`, built from two aggregates: the threads per owner
(:meth:`~durability.stores.aggregates.Aggregates.owner_groups`) and the threads with a row the
plane lacks (:meth:`~durability.stores.aggregates.Aggregates.missing_rows`, as many as the
outbox holds, not the store). Every other thread comes back whole. A thread the ledger records
with no checkpoint counts as whole (there is nothing to lose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from durability.analyses.common import RESTORABLE, frame_of
from durability.analyses.readiness import NEVER_CONNECTED
from durability.errors import ConfigError
from durability.stores.base import Store


@dataclass(frozen=True)
class ReadinessSummary:
    """``by_owner`` (``COLUMNS["readiness_by_owner"]``); ``not_whole``: the ``top`` threads a
    restore would not bring back whole (``COLUMNS["readiness"]``), worst first, then by lost
    bytes; ``not_whole_threads``: how many there are in all."""

    by_owner: pd.DataFrame
    not_whole: pd.DataFrame
    not_whole_threads: int


def readiness_summary(
    store: Store, top: int = 20, *, owners: pd.DataFrame | None = None
) -> ReadinessSummary:
    """What a restore from the plane would bring back now, counted in the store (see the
    module): per owner, and the ``top`` threads it would not bring back whole. ``owners``: a
    :func:`~durability.frames.owners` frame of this store already read, used instead of asking
    the store for the per-owner sums again."""
    if top < 1:
        raise ConfigError(f"cannot list the top {top}: ask for at least 1")
    if owners is None:
        found = store.scans.owner_groups()
    else:
        found = {name: owners[name].tolist() for name in ("threads", "checkpoints", "size_bytes")}
        found["owner"] = [None if pd.isna(o) else o for o in owners["owner"]]
    return _summary(store, found, top)


def _summary(store: Store, owners: dict[str, list[Any]], top: int) -> ReadinessSummary:
    if not store.replicates:
        return _never_connected(store, owners, top)
    missing = store.scans.missing_rows()
    threads = [
        {
            "thread_id": thread_id,
            "owner": owner,
            "restorable": "partly" if kept else "nothing",
            "checkpoints": count,
            "restorable_checkpoints": kept,
            "up_to_seq": up_to,
            "up_to_checkpoint": up_to_checkpoint,
            "lost_checkpoints": count - kept,
            "lost_bytes": lost,
            "why": why,
        }
        for thread_id, owner, count, kept, up_to, up_to_checkpoint, lost, why in zip(
            *missing.values(), strict=True
        )
    ]
    by_owner: dict[Any, dict[str, Any]] = {
        owner: _owner_row(owner, n, everything=n)
        for owner, n in zip(owners["owner"], owners["threads"], strict=True)
    }
    for row in threads:
        entry = by_owner.setdefault(row["owner"], _owner_row(row["owner"], 0, everything=0))
        entry[row["restorable"]] += 1
        entry["everything"] = max(entry["everything"] - 1, 0)
        entry["threads"] = max(entry["threads"], entry["partly"] + entry["nothing"])
        entry["lost_checkpoints"] += row["lost_checkpoints"]
        entry["lost_bytes"] += row["lost_bytes"]
    threads.sort(
        key=lambda r: (-RESTORABLE.index(r["restorable"]), -r["lost_bytes"], r["thread_id"])
    )
    return ReadinessSummary(_owner_frame(by_owner.values()), _threads(threads[:top]), len(threads))


def _never_connected(store: Store, owners: dict[str, list[Any]], top: int) -> ReadinessSummary:
    """A store that never replicated: a restore brings back nothing of any thread."""
    rows = [
        _owner_row(owner, n, nothing=n, lost_checkpoints=count, lost_bytes=size)
        for owner, n, count, size in zip(
            owners["owner"],
            owners["threads"],
            owners["checkpoints"],
            owners["size_bytes"],
            strict=True,
        )
    ]
    largest = store.scans.top_threads(top)
    threads = [
        {
            "thread_id": thread_id,
            "owner": owner,
            "restorable": "nothing",
            "checkpoints": count,
            "restorable_checkpoints": 0,
            "lost_checkpoints": count,
            "lost_bytes": size,
            "why": NEVER_CONNECTED,
        }
        for thread_id, owner, count, size in zip(
            largest["thread_id"],
            largest["owner"],
            largest["checkpoints"],
            largest["size_bytes"],
            strict=True,
        )
    ]
    return ReadinessSummary(_owner_frame(rows), _threads(threads), sum(owners["threads"]))


def _owner_row(owner: Any, threads: int, **counts: int) -> dict[str, Any]:
    row = {"owner": owner, "threads": threads, "lost_checkpoints": 0, "lost_bytes": 0}
    return row | dict.fromkeys(RESTORABLE, 0) | counts


def _owner_frame(rows: Any) -> pd.DataFrame:
    ordered = sorted(
        ({**row, "owner": "(none)" if row["owner"] is None else row["owner"]} for row in rows),
        key=lambda r: (-r["lost_bytes"], -r["nothing"], str(r["owner"])),
    )
    return frame_of(ordered, "readiness_by_owner")


def _threads(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = frame_of(rows, "readiness")
    frame["restorable"] = pd.Categorical(frame["restorable"], categories=RESTORABLE)
    return frame


__all__ = ["ReadinessSummary", "readiness_summary"]
