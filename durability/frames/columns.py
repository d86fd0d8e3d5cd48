"""The frames' columns and dtypes (:data:`COLUMNS`, one place), and the helpers that turn a
store's column chunks into typed pandas columns.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

from durability import vocabulary
from durability.clock import as_utc
from durability.errors import ConfigError
from durability.stores.base import Store
from durability.stores.scans import Columns
from durability.sweep import PLAN_COLUMNS

if TYPE_CHECKING:
    pass


import numpy as np
import pandas as pd

TIME: Final = "datetime64[ns, UTC]"


SPAN: Final = "timedelta64[ns]"


#: Every frame's columns and their dtypes: frame name -> column -> dtype (as ``str(dtype)``).
COLUMNS: dict[str, dict[str, str]] = {
    "checkpoints": {
        "thread_id": "string",
        "namespace": "string",
        "run_id": "string",
        "checkpoint_id": "string",
        "seq": "Int64",
        "node_id": "string",
        "step": "Int64",
        "step_type": "string",
        "status": "category",
        "created_at": TIME,
        "size_bytes": "int64",
        "synced": "boolean",
        "sync_error": "string",
    },
    "threads": {
        "thread_id": "string",
        "owner": "string",
        "run_id": "string",
        "status": "category",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "first_at": TIME,
        "newest_at": TIME,
        "started_at": TIME,
        "finished_at": TIME,
        "due_at": TIME,
        "declared_waiting": SPAN,
        "declared_finished": SPAN,
        "max_idle_gap": SPAN,
        "lease_holder": "string",
        "lease_expires_at": TIME,
        "parked": "bool",
        "park_deadline": TIME,
        "unreplicated": "int64",
    },
    "outbox": {
        "thread_id": "string",
        "namespace": "string",
        "checkpoint_id": "string",
        "seq": "Int64",
        "project_id": "string",
        "created_at": TIME,
        "synced_at": TIME,
        "size_bytes": "int64",
        "state": "category",
        "attempts": "int64",
        "last_error": "string",
        "sync_error": "string",
        "age": SPAN,
    },
    "write_times": {
        "created_at": TIME,
    },
    "activity": {
        "time": TIME,
        "checkpoints": "int64",
        "size_bytes": "int64",
    },
    "owners": {
        "owner": "string",
        "threads": "int64",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "finished": "int64",
    },
    "top_threads": {
        "thread_id": "string",
        "owner": "string",
        "checkpoints": "int64",
        "size_bytes": "int64",
        "newest_at": TIME,
    },
    "outbox_states": {
        "state": "category",
        "rows": "int64",
        "size_bytes": "int64",
        "attempts": "int64",
    },
    "backlog": {
        "time": TIME,
        "pending": "int64",
        "oldest_pending_age": SPAN,
    },
    "parks": {
        "thread_id": "string",
        "run_id": "string",
        "node_id": "string",
        "reason": "string",
        "created_at": TIME,
        "deadline": TIME,
        "deadline_source": "string",
        "time_left": SPAN,
        "expired": "bool",
    },
    "retention": dict(PLAN_COLUMNS),
    "erasures": {
        "tombstone": "string",
        "erased_at": TIME,
        "erased_by": "string",
        "checkpoints": "int64",
        "bytes": "int64",
        "pending_writes": "int64",
        "outbox_dropped": "int64",
        "plane": "string",
    },
    "encryption": {
        "key_id": "string",
        "status": "category",
        "rows": "int64",
        "bytes": "int64",
        "share": "float64",
    },
    "problems": {
        "check": "string",
        "severity": "category",
        "thread_id": "string",
        "rows": "int64",
        "detail": "string",
        "fix": "string",
    },
    "runs": {
        "run_id": "string",
        "thread_id": "string",
        "runner": "string",
        "status": "category",
        "started_at": TIME,
        "ended_at": TIME,
        "steps": "int64",
        "duration": SPAN,
        "reason": "string",
        "error": "string",
    },
}


#: The extra column :func:`checkpoints` adds with ``decode_state=True``.
STATE_COLUMN = {"state": "object"}


#: The categories of ``outbox.state``.
OUTBOX_STATES = ("pending", "synced", "quarantined")


#: The categories of ``runs.status`` (:data:`durability.vocabulary.RUN_STATUSES`).
RUN_STATUSES = vocabulary.RUN_STATUSES


NAT = np.iinfo(np.int64).min


#: The environment variable that caps the rows a whole-store frame reads (default below).
MAX_ROWS_ENV = "DURABILITY_FRAME_MAX_ROWS"
#: The cap when the variable is unset: a frame of more rows than this is refused, not loaded.
MAX_ROWS = 5_000_000
#: Per whole-store frame, the frames that answer the same question at any size.
AGGREGATES = {
    "checkpoints": "frames.activity, analyses.bytes_by or analyses.largest_checkpoints",
    "threads": "frames.owners or frames.top_threads",
    "outbox": "frames.outbox_states or frames.outbox_rows",
    "runs": "frames.runs(store, sample=N)",
    "retention": "sweep.plan_sweep(store).groups() or .to_frame(action=..., limit=N)",
}


def row_cap() -> int:
    """How many rows a whole-store frame may read (:data:`MAX_ROWS_ENV`, else :data:`MAX_ROWS`)."""
    raw = os.environ.get(MAX_ROWS_ENV, "")
    try:
        return int(raw) if raw else MAX_ROWS
    except ValueError as exc:
        raise ConfigError(
            f"cannot build a frame: {MAX_ROWS_ENV}={raw!r} is not a whole number of rows; "
            "set it to one, such as 5000000, or unset it"
        ) from exc


def collect(
    chunks: Iterable[Columns], names: Sequence[str], *, whole: str | None = None
) -> Columns:
    """Concatenate the store's column chunks (numpy object arrays) into one array per column.

    ``whole`` names the whole-store frame being read: past :func:`row_cap` rows the read stops
    with a :class:`~durability.errors.ConfigError` naming the frames that answer at any size
    (:data:`AGGREGATES`), instead of loading millions of rows.
    """
    cap = row_cap() if whole is not None else None
    parts: dict[str, list[Any]] = {name: [] for name in names}
    read = 0
    for chunk in chunks:
        read += len(chunk[names[0]]) if names else 0
        if cap is not None and read > cap:
            raise ConfigError(
                f"cannot build frames.{whole}: the store holds more than {cap:,} of its rows, "
                f"too many to load; use {AGGREGATES[str(whole)]} (counted or ranked in the "
                f"store), or raise {MAX_ROWS_ENV} to load them all"
            )
        for name in names:
            parts[name].append(chunk[name])
    return {name: joined(found) for name, found in parts.items()}


def check_cap(whole: str, rows: int) -> None:
    """Refuse to build the whole-store frame ``whole`` of ``rows`` rows past :func:`row_cap`,
    naming what answers at any size (:data:`AGGREGATES`), as :func:`collect` does."""
    cap = row_cap()
    if rows > cap:
        raise ConfigError(
            f"cannot build frames.{whole}: the store holds more than {cap:,} of its rows, "
            f"too many to load; use {AGGREGATES[whole]} (counted or ranked in the store), or "
            f"raise {MAX_ROWS_ENV} to load them all"
        )


def joined(parts: list[Any]) -> Any:
    if not parts:
        return np.empty(0, dtype=object)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def moment(store: Store, now: datetime | None) -> datetime:
    return as_utc(now) if now is not None else store.clock()


def micros_of(value: datetime) -> int:
    from durability.clock import to_micros

    return to_micros(value)


def strings(values: Sequence[Any]) -> Any:
    return pd.array(np.asarray(values, dtype=object), dtype="string")


def booleans(values: Sequence[Any]) -> Any:
    # SQLite answers 0/1 for a boolean column.
    return pd.array([None if v is None else bool(v) for v in values], dtype="boolean")


def ints(values: Sequence[int]) -> np.ndarray[Any, Any]:
    return np.asarray(values, dtype="int64")


def nullable_ints(values: Sequence[int | None]) -> Any:
    raw = np.asarray(values, dtype=object)
    missing = pd.isna(raw)
    filled = np.where(missing, 0, raw).astype(np.int64) if missing.any() else raw.astype(np.int64)
    return pd.arrays.IntegerArray(filled, missing)


def categories(values: Sequence[str | None]) -> pd.Categorical:
    return pd.Categorical(np.asarray(values, dtype=object))


def statuses(values: Sequence[str | None]) -> pd.Categorical:
    """Stored checkpoint statuses in people's words (``interrupted`` reads ``parked``), as a
    categorical whose categories start with :data:`~durability.vocabulary.CHECKPOINT_STATUSES`."""
    stored = pd.Categorical(np.asarray(values, dtype=object))
    named = pd.Categorical(stored.map(vocabulary.status_word, na_action="ignore"))
    extra = sorted(set(named.categories) - set(vocabulary.CHECKPOINT_STATUSES))
    return named.set_categories([*vocabulary.CHECKPOINT_STATUSES, *extra])


def nanos(values: Sequence[int | None]) -> np.ndarray[Any, Any]:
    """Microseconds (``None`` allowed) as int64 nanoseconds, ``None`` as NaT's integer."""
    raw = np.asarray(values, dtype=object)
    try:  # the common case, nothing missing: one cast
        return raw.astype(np.int64) * 1000
    except TypeError:
        pass
    missing = pd.isna(raw)
    result = np.where(missing, 0, raw).astype(np.int64) * 1000
    result[missing] = NAT
    return result


def times(values: Sequence[int | None]) -> Any:
    return pd.array(cast(Any, nanos(values).view("M8[ns]")), dtype="datetime64[ns]").tz_localize(
        "UTC"
    )


def spans(values: Sequence[int | None]) -> Any:
    return pd.array(cast(Any, nanos(values).view("m8[ns]")), dtype=SPAN)


def in_write_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows by ``seq``, ties (Redis counts ``seq`` per thread) by thread id.

    SQL and memory stores already answer in ``seq`` order, which is checked, not sorted again.
    """
    seq = frame["seq"].to_numpy(dtype="int64", na_value=0)
    if len(seq) < 2 or bool((seq[1:] > seq[:-1]).all()):
        return frame.reset_index(drop=True)
    codes, _ = pd.factorize(frame["thread_id"], sort=True)
    return frame.take(np.lexsort((codes, seq))).reset_index(drop=True)


def in_order(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    if len(frame) < 2:
        return frame.reset_index(drop=True)
    return frame.sort_values(by, kind="stable", ignore_index=True)


def empty(name: str) -> pd.DataFrame:
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in COLUMNS[name].items()})
