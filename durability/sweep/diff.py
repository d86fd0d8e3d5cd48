"""What a proposed retention policy would do differently from the one in force, thread by thread."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from durability.clock import as_utc
from durability.settings import Settings
from durability.stores.base import Store
from durability.sweep.plan import _bulk_allocation, _inputs, _plan

if TYPE_CHECKING:
    import pandas as pd


def policy_diff(
    store: Store, current: Settings, proposed: Settings, now: datetime | None = None
) -> pd.DataFrame:
    """Threads whose sweep action differs between two settings, on the same store and ``now``.

    Columns: thread_id, horizon, current_action, proposed_action, checkpoints, size_bytes. A
    finished thread's due time is fixed at its mark, so a proposed finished retention changes
    nothing for threads already marked: only new marks move.
    """
    import pandas as pd

    _inputs(store, current, now)
    _inputs(store, proposed, now)
    when = as_utc(now) if now is not None else store.clock()
    with _bulk_allocation():
        table = store.sweep_columns()
        before = _plan(store, current, when, table, None)._columns
        after = _plan(store, proposed, when, table, None)._columns
    # One table, one order: both plans hold the same thread in the same row.
    changed = before["action"] != after["action"]
    return pd.DataFrame(
        {
            "thread_id": pd.Series(before["thread_id"][changed], dtype="string"),
            "horizon": pd.Series(before["horizon"][changed], dtype="string"),
            "current_action": pd.Series(before["action"][changed], dtype="string"),
            "proposed_action": pd.Series(after["action"][changed], dtype="string"),
            "checkpoints": pd.Series(before["checkpoints"][changed], dtype="int64"),
            "size_bytes": pd.Series(before["size_bytes"][changed], dtype="int64"),
        }
    )
