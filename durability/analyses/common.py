"""What the analyses share: their columns (one place), the store's chunks, typed frames."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from durability.frames.columns import SPAN, TIME
from durability.stores.base import Store
from durability.stores.scans import Columns

#: Every analysis frame's columns and dtypes: frame name -> column -> dtype.
COLUMNS: dict[str, dict[str, str]] = {
    "bytes_by": {
        "key": "string",
        "threads": "int64",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "share": "float64",
    },
    "bytes_by_state_key": {
        "key": "string",
        "checkpoints": "int64",
        "sample_bytes": "int64",
        "share": "float64",
        "estimated_bytes": "int64",
    },
    "largest_threads": {
        "thread_id": "string",
        "owner": "string",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "newest_at": TIME,
    },
    "largest_checkpoints": {
        "thread_id": "string",
        "namespace": "string",
        "checkpoint_id": "string",
        "node_id": "string",
        "runner": "string",
        "created_at": TIME,
        "size_bytes": "int64",
    },
    "forecast": {
        "policy": "string",
        "role": "string",
        "day": TIME,
        "threads": "int64",
        "size_bytes": "int64",
    },
    "readiness": {
        "thread_id": "string",
        "owner": "string",
        "restorable": "category",
        "checkpoints": "int64",
        "restorable_checkpoints": "int64",
        "up_to_seq": "Int64",
        "up_to_checkpoint": "string",
        "lost_checkpoints": "int64",
        "lost_bytes": "int64",
        "why": "string",
    },
    "readiness_by_owner": {
        "owner": "string",
        "threads": "int64",
        "everything": "int64",
        "partly": "int64",
        "nothing": "int64",
        "lost_checkpoints": "int64",
        "lost_bytes": "int64",
    },
    "backtest": {
        "policy": "string",
        "role": "string",
        "day": TIME,
        "threads": "int64",
        "size_bytes": "int64",
        "deleted_threads": "int64",
        "cut_conversations": "int64",
    },
    "cut_conversations": {
        "policy": "string",
        "thread_id": "string",
        "owner": "string",
        "deleted_on": TIME,
        "last_before": TIME,
        "next_turn": TIME,
        "gap": SPAN,
    },
}

#: The three answers of a restore readiness check, worst last.
RESTORABLE = ("everything", "partly", "nothing")


def header_chunks(store: Store, names: Sequence[str]) -> Iterator[Columns]:
    """The store's checkpoint header columns ``names``, in chunks (no payload read)."""
    return store.checkpoint_columns(columns=names)


def thread_chunks(store: Store, names: Sequence[str]) -> Iterator[Columns]:
    """The store's per-thread columns ``names`` (aggregated in the store), in chunks."""
    for chunk in store.thread_columns():
        yield {name: chunk[name] for name in names}


def _typed(values: list[Any], dtype: str) -> Any:
    if dtype == TIME:
        micros = [None if v is None or v is pd.NaT else v for v in values]
        if all(isinstance(v, int | np.integer) or v is None for v in micros):
            return pd.to_datetime(pd.Series(micros, dtype="Int64"), unit="us", utc=True)
        return pd.to_datetime(pd.Series(micros, dtype=object), utc=True)
    if dtype == SPAN:
        return pd.to_timedelta(pd.Series(values, dtype=object))
    if dtype == "category":
        return pd.Categorical(values)
    return pd.array(values, dtype=cast(Any, dtype))


def frame_of(rows: Sequence[Mapping[str, Any]], name: str) -> pd.DataFrame:
    """A frame of ``rows`` with exactly ``COLUMNS[name]`` (times given as microseconds since
    the epoch or as datetimes)."""
    spec = COLUMNS[name]
    data = {col: _typed([row.get(col) for row in rows], dtype) for col, dtype in spec.items()}
    frame = pd.DataFrame({col: pd.Series(values) for col, values in data.items()})
    for col, dtype in spec.items():
        if dtype not in (TIME, SPAN, "category"):
            frame[col] = frame[col].astype(cast(Any, dtype))
    return frame
