"""Frames for people to read: sizes as ``1.2 MiB``, ages as ``3d 4h``, times to the minute.

:func:`readable` is what the static report and the notebooks' displayed tables show; the frames
themselves (and every ``--json``) keep the numbers, so a table can still be sorted and summed.
"""

from __future__ import annotations

from typing import Any

from durability._extras import missing_extra
from durability.humanize import format_age, format_bytes
from durability.vocabulary import status_word

try:
    import pandas as pd
except ModuleNotFoundError as exc:  # the notebook extra
    raise missing_extra(exc, "durability.tables") from exc


def is_bytes_column(name: str) -> bool:
    """A column holding byte counts: ``bytes``, ``size_bytes``, ``kept_bytes`` …"""
    return name == "bytes" or name.endswith("_bytes") or name.startswith("bytes_")


def _cell(value: Any, render: Any) -> Any:
    return "" if value is None or pd.isna(value) else render(value)


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with people's units: byte columns (:func:`is_bytes_column`) in binary
    units, durations as ages, aware times as ``YYYY-MM-DD HH:MM`` (UTC), statuses in the one
    vocabulary (:mod:`durability.vocabulary`). Every other column is left as it is."""
    out = frame.copy()
    for name in out.columns:
        column = out[name]
        if is_bytes_column(str(name)) and pd.api.types.is_numeric_dtype(column):
            out[name] = [_cell(v, format_bytes) for v in column]
        elif pd.api.types.is_timedelta64_dtype(column):
            out[name] = [_cell(v, lambda t: format_age(t.to_pytimedelta())) for v in column]
        elif pd.api.types.is_datetime64_any_dtype(column):
            out[name] = [_cell(v, lambda t: t.strftime("%Y-%m-%d %H:%M")) for v in column]
        elif str(name) == "status":
            out[name] = [status_word(v) if isinstance(v, str) else v for v in column]
    return out


__all__ = ["is_bytes_column", "readable"]
