"""What a proposed retention policy would do differently from the one in force, thread by thread."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from durability.errors import ConfigError
from durability.settings import Settings
from durability.stores.base import Store
from durability.sweep.plan import SweepPlan, plan_sweeps

if TYPE_CHECKING:
    import pandas as pd


def policy_diff(
    store: Store, current: Settings, proposed: Settings, now: datetime | None = None
) -> pd.DataFrame:
    """Threads whose sweep action differs between two settings, on the same store and ``now``:
    :func:`plans_diff` of the two plans :func:`plan_sweeps` makes from one read.

    Columns: thread_id, horizon, current_action, proposed_action, checkpoints, size_bytes. A
    finished thread's due time is fixed at its mark, so a proposed finished retention changes
    nothing for threads already marked: only new marks move.
    """
    return plans_diff(*plan_sweeps(store, [current, proposed], now))


def plans_diff(current: SweepPlan, proposed: SweepPlan) -> pd.DataFrame:
    """The threads whose action differs between two plans :func:`plan_sweeps` made together
    (one read, so the same thread in the same row); columns as :func:`policy_diff`'s.

    Raises:
        ConfigError: the plans were not made together (other threads, or in another order).
    """
    import numpy as np
    import pandas as pd

    before, after = current._columns, proposed._columns
    if current.now != proposed.now or not np.array_equal(before["thread_id"], after["thread_id"]):
        raise ConfigError(
            "cannot compare these sweep plans: they hold other threads or another now; make "
            "them together with sweep.plan_sweeps(store, [current, proposed], now)"
        )
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
