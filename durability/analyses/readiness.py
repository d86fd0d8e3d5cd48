"""Restore readiness: if this disk died now, what would a restore from the plane bring back?

A restore rebuilds a thread from the rows the plane holds, in write order; a row the plane
lacks (pending in the outbox, or quarantined: refused by the plane) breaks the chain, so a
thread comes back *up to* its last checkpoint before the first missing row. Read from the
store's header columns (``synced``, ``sync_error``) in chunks; nothing is sent or changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from durability.analyses.common import RESTORABLE, frame_of, header_chunks, thread_chunks
from durability.stores.base import Store

#: Why a thread cannot come back whole, when no row is missing yet.
NEVER_CONNECTED = "never connected: the store does not replicate to a plane"


@dataclass
class _Thread:
    checkpoints: int = 0
    restorable: int = 0
    up_to_seq: int | None = None
    up_to_checkpoint: str | None = None
    lost_bytes: int = 0
    why: str | None = None

    @property
    def lost(self) -> int:
        return self.checkpoints - self.restorable

    @property
    def answer(self) -> str:
        """One of :data:`RESTORABLE`."""
        if self.lost == 0:
            return "everything"
        return "nothing" if self.restorable == 0 else "partly"


def _why(synced: object, error: object) -> str | None:
    """``None`` for a row the plane holds, else why it does not."""
    if error:
        return f"quarantined: {error}"
    return None if synced else "pending: not sent to the plane yet"


def _first_missing(store: Store) -> dict[str, tuple[int, str]]:
    """Each thread's first row the plane lacks, as ``(seq, why)``.

    Rows do not come in write order on every provider, so this is a pass of its own before
    :func:`_tally` counts what comes before and after it.
    """
    first_missing: dict[str, tuple[int, str]] = {}
    names = ("thread_id", "seq", "synced", "sync_error")
    for chunk in header_chunks(store, names):
        for thread_id, seq, synced, error in zip(*(chunk[n] for n in names), strict=True):
            why = _why(synced, error)
            if why is not None and (seq, why) < first_missing.get(thread_id, (seq + 1, "")):
                first_missing[thread_id] = (seq, why)
    return first_missing


def _tally(store: Store, first_missing: dict[str, tuple[int, str]]) -> dict[str, _Thread]:
    """Each thread's checkpoints split into the restorable ones and the lost bytes."""
    replicates = store.replicates
    threads: dict[str, _Thread] = {}
    names = ("thread_id", "seq", "checkpoint_id", "size_bytes")
    for chunk in header_chunks(store, names):
        for thread_id, seq, checkpoint_id, size in zip(*(chunk[n] for n in names), strict=True):
            t = threads.setdefault(thread_id, _Thread())
            t.checkpoints += 1
            missing, why = first_missing.get(thread_id, (None, None))
            t.why = why if replicates else NEVER_CONNECTED
            if replicates and (missing is None or seq < missing):
                t.restorable += 1
                if t.up_to_seq is None or seq > t.up_to_seq:
                    t.up_to_seq, t.up_to_checkpoint = seq, checkpoint_id
            else:
                t.lost_bytes += int(size or 0)
    return threads


def _row(thread_id: str, owner: object, t: _Thread) -> dict[str, object]:
    return {
        "thread_id": thread_id,
        "owner": owner,
        "restorable": t.answer,
        "checkpoints": t.checkpoints,
        "restorable_checkpoints": t.restorable,
        "up_to_seq": t.up_to_seq,
        "up_to_checkpoint": t.up_to_checkpoint,
        "lost_checkpoints": t.lost,
        "lost_bytes": t.lost_bytes,
        "why": t.why,
    }


def readiness(store: Store) -> pd.DataFrame:
    """One row per thread (``COLUMNS["readiness"]``), the worst first, then by lost bytes.

    ``restorable`` is ``everything`` (the plane holds every row), ``partly`` (it holds the rows
    up to ``up_to_seq`` / ``up_to_checkpoint``, then one is missing) or ``nothing``;
    ``lost_checkpoints`` / ``lost_bytes`` are what a restore would not bring back, ``why`` the
    first missing row's reason (``pending: …``, ``quarantined: <the plane's reason>``) or that
    the store was never connected (then every thread is ``nothing``).
    """
    threads = _tally(store, _first_missing(store) if store.replicates else {})
    owners = {
        tid: owner
        for chunk in thread_chunks(store, ("thread_id", "owner"))
        for tid, owner in zip(chunk["thread_id"], chunk["owner"], strict=True)
    }
    worst_first = sorted(
        threads.items(),
        key=lambda item: (-RESTORABLE.index(item[1].answer), -item[1].lost_bytes, item[0]),
    )
    frame = frame_of([_row(tid, owners.get(tid), t) for tid, t in worst_first], "readiness")
    frame["restorable"] = pd.Categorical(frame["restorable"], categories=RESTORABLE)
    return frame


def readiness_by_owner(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`readiness` summed by owner (``COLUMNS["readiness_by_owner"]``), the owners with
    the most lost bytes first; a thread with no owner counts under ``(none)``."""
    if frame.empty:
        return frame_of([], "readiness_by_owner")
    owner = frame["owner"].astype("string").fillna("(none)")
    counts = pd.crosstab(owner, frame["restorable"]).reindex(columns=list(RESTORABLE), fill_value=0)
    lost = frame.groupby(owner)[["lost_checkpoints", "lost_bytes"]].sum()
    rows = [
        {
            "owner": name,
            "threads": int(counts.loc[name].sum()),
            **{answer: int(counts.loc[name, answer]) for answer in RESTORABLE},
            "lost_checkpoints": int(lost.loc[name, "lost_checkpoints"]),
            "lost_bytes": int(lost.loc[name, "lost_bytes"]),
        }
        for name in counts.index
    ]
    rows.sort(key=lambda r: (-r["lost_bytes"], -r["nothing"], str(r["owner"])))
    return frame_of(rows, "readiness_by_owner")


__all__ = ["NEVER_CONNECTED", "readiness", "readiness_by_owner"]
