"""The frame of past erasures: one row per tombstone, from the receipt it keeps."""

from __future__ import annotations

from typing import Any

import pandas as pd

from durability.frames.columns import in_order, ints, micros_of, strings, times
from durability.stores.base import Store
from durability.stores.erasure import ErasureReceipt


def erasures(store: Store) -> pd.DataFrame:
    """One row per erased thread (``COLUMNS["erasures"]``), oldest erasure first.

    The thread id is never shown: ``tombstone`` is its keyed hash. The counts are the first
    erasure's receipt; ``plane`` what the plane answered (or that the request still waits);
    a store that keeps no tombstones (a foreign one) gives an empty frame.
    """
    stones = store.tombstones.all() if store.tombstones is not None else []
    receipts = [ErasureReceipt.from_json(s.receipt) if s.receipt else None for s in stones]

    def part(receipt: ErasureReceipt | None, where: str, name: str, empty: Any = 0) -> Any:
        return empty if receipt is None else getattr(receipt, where).get(name, empty)

    frame = pd.DataFrame(
        {
            "tombstone": strings([s.hash for s in stones]),
            "erased_at": times([micros_of(s.erased_at) for s in stones]),
            "erased_by": strings([s.erased_by for s in stones]),
            "checkpoints": ints([part(r, "store", "checkpoints") for r in receipts]),
            "bytes": ints([part(r, "store", "bytes") for r in receipts]),
            "pending_writes": ints([part(r, "store", "pending_writes") for r in receipts]),
            "outbox_dropped": ints(
                [
                    len(part(r, "outbox", "pending_dropped", []))
                    + len(part(r, "outbox", "quarantined_dropped", []))
                    for r in receipts
                ]
            ),
            "plane": strings([part(r, "plane", "status", None) for r in receipts]),
        }
    )
    return in_order(frame, ["erased_at", "tombstone"])
