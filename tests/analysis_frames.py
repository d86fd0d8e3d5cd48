"""Small frames with the columns and dtypes of :data:`durability.frames.COLUMNS`, built by hand.

The simulation and plot tests use them, so they exercise exact shapes and edge values rather
than whatever one store happens to return.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from durability.frames import COLUMNS


def _frame(rows: Sequence[dict[str, Any]], dtypes: dict[str, str]) -> pd.DataFrame:
    columns: dict[str, Any] = {}
    for name, dtype in dtypes.items():
        values = [row.get(name) for row in rows]
        if dtype.startswith("datetime64"):
            columns[name] = pd.Series(pd.to_datetime(values, utc=True)).astype(dtype)
        elif dtype.startswith("timedelta64"):
            columns[name] = pd.Series(pd.to_timedelta(values)).astype(dtype)
        elif dtype == "bool":
            columns[name] = pd.Series([bool(v) for v in values], dtype=bool)
        else:
            columns[name] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(columns)


def thread(
    thread_id: str,
    *,
    newest_at: datetime,
    size: int = 1000,
    finished_at: datetime | None = None,
    declared_waiting: timedelta | None = None,
    declared_finished: timedelta | None = None,
    max_idle_gap: timedelta | None = None,
    park_deadline: datetime | None = None,
    lease_expires_at: datetime | None = None,
    unreplicated: int = 0,
) -> dict[str, Any]:
    """One row of the threads frame (the columns the analysis reads, the rest plausible)."""
    return {
        "thread_id": thread_id,
        "owner": "test",
        "run_id": f"run-{thread_id}",
        "status": "completed",
        "checkpoints": 3,
        "size_bytes": size,
        "first_at": newest_at - timedelta(hours=1),
        "newest_at": newest_at,
        "started_at": newest_at - timedelta(hours=1),
        "finished_at": finished_at,
        "due_at": None,
        "declared_waiting": declared_waiting,
        "declared_finished": declared_finished,
        "max_idle_gap": max_idle_gap if max_idle_gap is not None else timedelta(minutes=5),
        "lease_holder": "worker" if lease_expires_at else None,
        "lease_expires_at": lease_expires_at,
        "parked": park_deadline is not None,
        "park_deadline": park_deadline,
        "unreplicated": unreplicated,
    }


def threads_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The threads frame of ``rows`` (see :func:`thread`)."""
    return _frame(rows, COLUMNS["threads"])


def parks_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The parks frame of ``rows`` (thread_id, created_at, deadline; the rest filled)."""
    full = [
        {
            "run_id": "r",
            "node_id": "approve",
            "reason": "needs approval",
            "deadline_source": "declared",
            "expired": False,
            **row,
        }
        for row in rows
    ]
    return _frame(full, COLUMNS["parks"])


def checkpoints_frame(created: Sequence[datetime], *, size: int = 500) -> pd.DataFrame:
    """A checkpoints frame with one row per ``created`` time, all synced."""
    rows = [
        {
            "thread_id": f"t{i % 3}",
            "namespace": "",
            "run_id": "r",
            "checkpoint_id": f"c{i}",
            "seq": i + 1,
            "node_id": "n",
            "step": i,
            "step_type": "node",
            "status": "completed",
            "created_at": at,
            "size_bytes": size,
            "synced": True,
            "sync_error": None,
        }
        for i, at in enumerate(created)
    ]
    return _frame(rows, COLUMNS["checkpoints"])


def runs_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The run-health frame of ``rows``."""
    return _frame(rows, COLUMNS["runs"])


def backlog_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The backlog frame of ``rows``."""
    return _frame(rows, COLUMNS["backlog"])
