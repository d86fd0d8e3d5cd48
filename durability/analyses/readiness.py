"""Restore readiness: if this disk died now, what would a restore from the plane bring back?

A restore rebuilds a thread from the rows the plane holds, in write order; a row the plane
lacks (pending in the outbox, or quarantined: refused by the plane) breaks the chain, so a
thread comes back *up to* its last checkpoint before the first missing row. Read from the
store's header columns (``synced``, ``sync_error``) in chunks; nothing is sent or changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from durability.analyses.common import RESTORABLE, frame_of, header_chunks, thread_chunks
from durability.stores.base import Store

try:
    import pandas as pd
except ModuleNotFoundError as exc:  # pragma: no cover - the notebook extra
    from durability._extras import missing_extra

    raise missing_extra(exc, "durability.analyses") from exc

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


def _why(synced: object, error: object) -> str | None:
    """``None`` for a row the plane holds, else why it does not."""
    if error:
        return f"quarantined: {error}"
    return None if synced else "pending: not sent to the plane yet"


def readiness(store: Store) -> pd.DataFrame:
    """One row per thread (``COLUMNS["readiness"]``), the worst first, then by lost bytes.

    ``restorable`` is ``everything`` (the plane holds every row), ``partly`` (it holds the rows
    up to ``up_to_seq`` / ``up_to_checkpoint``, then one is missing) or ``nothing``;
    ``lost_checkpoints`` / ``lost_bytes`` are what a restore would not bring back, ``why`` the
    first missing row's reason (``pending: …``, ``quarantined: <the plane's reason>``) or that
    the store was never connected (then every thread is ``nothing``).
    """
    replicates = store.replicates
    # Rows do not come in write order on every provider: a first pass finds each thread's
    # first missing row, a second counts what comes before and after it.
    first_missing: dict[str, tuple[int, str]] = {}
    names = ("thread_id", "seq", "synced", "sync_error")
    for chunk in header_chunks(store, names) if replicates else ():
        for thread_id, seq, synced, error in zip(*(chunk[n] for n in names), strict=True):
            why = _why(synced, error)
            if why is not None and (seq, why) < first_missing.get(thread_id, (seq + 1, "")):
                first_missing[thread_id] = (seq, why)
    threads: dict[str, _Thread] = {}
    names = ("thread_id", "seq", "checkpoint_id", "size_bytes")
    for chunk in header_chunks(store, names):
        for thread_id, seq, checkpoint_id, size in zip(*(chunk[n] for n in names), strict=True):
            t = threads.setdefault(thread_id, _Thread())
            t.checkpoints += 1
            missing, why = first_missing.get(thread_id, (None, None))
            t.why = why
            if replicates and (missing is None or seq < missing):
                t.restorable += 1
                if t.up_to_seq is None or seq > t.up_to_seq:
                    t.up_to_seq, t.up_to_checkpoint = seq, checkpoint_id
            else:
                t.lost_bytes += int(size or 0)
    owners = {
        tid: owner
        for chunk in thread_chunks(store, ("thread_id", "owner"))
        for tid, owner in zip(chunk["thread_id"], chunk["owner"], strict=True)
    }
    rows = []
    for thread_id, t in threads.items():
        lost = t.checkpoints - t.restorable
        answer = "everything" if lost == 0 else ("nothing" if t.restorable == 0 else "partly")
        rows.append(
            {
                "thread_id": thread_id,
                "owner": owners.get(thread_id),
                "restorable": answer,
                "checkpoints": t.checkpoints,
                "restorable_checkpoints": t.restorable,
                "up_to_seq": t.up_to_seq,
                "up_to_checkpoint": t.up_to_checkpoint,
                "lost_checkpoints": lost,
                "lost_bytes": t.lost_bytes,
                "why": t.why if replicates else NEVER_CONNECTED,
            }
        )
    rows.sort(
        key=lambda r: (
            -RESTORABLE.index(str(r["restorable"])),
            -int(r["lost_bytes"] or 0),
            str(r["thread_id"]),
        )
    )
    frame = frame_of(rows, "readiness")
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
