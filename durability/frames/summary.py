"""Frames of a store of any size: sums per owner and per outbox state, and top-N threads.

Each is counted or ranked in the store (``store.scans``'s aggregates: a ``GROUP BY`` or an
``ORDER BY … LIMIT`` on SQL, chunks of columns elsewhere), so its size follows the number of
groups or ``top``, never the number of threads or checkpoints: what a notebook shows of a
store too large for :func:`~durability.frames.threads` or :func:`~durability.frames.outbox`
(and :func:`outbox_rows`, the first ``limit`` rows of one state).
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from durability.errors import CapabilityError, ConfigError
from durability.frames.columns import (
    OUTBOX_STATES,
    SPAN,
    empty,
    ints,
    micros_of,
    moment,
    nullable_ints,
    strings,
    times,
)
from durability.stores.base import Store


def owners(store: Store) -> pd.DataFrame:
    """Per owner of the ledger (``COLUMNS["owners"]``), most bytes first: threads, their
    checkpoints and bytes, and how many finished; threads no run recorded have no owner."""
    found = store.scans.owner_groups()
    return pd.DataFrame(
        {
            "owner": strings(found["owner"]),
            "threads": ints(found["threads"]),
            "checkpoints": ints(found["checkpoints"]),
            "size_bytes": ints(found["size_bytes"]),
            "finished": ints(found["finished"]),
        }
    )


def top_threads(store: Store, top: int = 100, *, by: str = "newest_at") -> pd.DataFrame:
    """The ``top`` threads with the newest checkpoints (``by="newest_at"``) or the most bytes
    (``by="size_bytes"``), in that order (``COLUMNS["top_threads"]``)."""
    found = store.scans.top_threads(top, by)
    return pd.DataFrame(
        {
            "thread_id": strings(found["thread_id"]),
            "owner": strings(found["owner"]),
            "checkpoints": ints(found["checkpoints"]),
            "size_bytes": ints(found["size_bytes"]),
            "newest_at": times(found["newest_at"]),
        }
    )


def outbox_states(store: Store, *, owners: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per outbox state (``COLUMNS["outbox_states"]``): rows, bytes and delivery attempts, the
    states with rows only; empty for a store that keeps no outbox. ``owners``: a
    :func:`owners` frame of this store already read, whose sums are the store's totals (a SQL
    store then does not count every checkpoint again)."""
    totals = None
    if owners is not None:
        totals = (int(owners.checkpoints.sum()), int(owners.size_bytes.sum()))
    try:
        found = store.scans.outbox_groups(totals)
    except CapabilityError:
        return empty("outbox_states")
    return pd.DataFrame(
        {
            "state": pd.Categorical(found["state"], categories=OUTBOX_STATES),
            "rows": ints(found["rows"]),
            "size_bytes": ints(found["size_bytes"]),
            "attempts": ints(found["attempts"]),
        }
    )


def outbox_rows(
    store: Store, state: str, limit: int = 20, now: datetime | None = None
) -> pd.DataFrame:
    """The first ``limit`` outbox entries in ``state`` (pending, synced or quarantined) in write
    order — for pending rows, those waiting longest — as :func:`~durability.frames.outbox`
    gives them (``COLUMNS["outbox"]``); empty for a store that keeps no outbox."""
    if store.outbox is None:
        return empty("outbox")
    if limit < 1:
        raise ConfigError(f"cannot list outbox rows: limit={limit} must be at least 1")
    at = pd.Timestamp(moment(store, now))
    found = store.outbox.entries(state=state, limit=limit)
    created = times([micros_of(e.created_at) for e in found])
    synced_at = times([micros_of(e.synced_at) if e.synced_at else None for e in found])
    left = pd.Series(synced_at, copy=False).where(pd.Series([e.synced for e in found]), at)
    return pd.DataFrame(
        {
            "thread_id": strings([e.thread_id for e in found]),
            "namespace": strings([e.namespace for e in found]),
            "checkpoint_id": strings([e.checkpoint_id for e in found]),
            "seq": nullable_ints([e.seq for e in found]),
            "project_id": strings([e.project_id for e in found]),
            "created_at": created,
            "synced_at": synced_at,
            "size_bytes": ints([e.size_bytes for e in found]),
            "state": pd.Categorical([state] * len(found), categories=OUTBOX_STATES),
            "attempts": ints([e.attempts for e in found]),
            "last_error": strings([e.last_error for e in found]),
            "sync_error": strings([e.sync_error for e in found]),
            "age": (left - pd.Series(created, copy=False)).astype(SPAN).array,
        }
    )
