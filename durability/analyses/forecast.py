"""Growth forecast: bytes and threads over the coming days under a policy, from the store's own
write history, and the day the store crosses a size.

The model, stated so it can be checked:

* The threads there now go as :func:`durability.simulate.daily` says (one sweep a day under the
  policy, no new writes to them).
* Every coming day writes what the same weekday wrote on average over the last ``window``
  days: ``bytes`` (every checkpoint written that day) and ``threads`` (threads whose first
  checkpoint was that day), read from the store's header columns.
* A day's writes stay until its threads come due: a share ``finished`` of them (the share of
  the window's new threads that are marked finished) after ``span`` + the finished value, the
  rest after ``span`` + the waiting value, ``span`` being the median time between a thread's
  first and newest checkpoint over the window's new threads.

``frame.attrs`` carry the fitted ``bytes_per_day``, ``threads_per_day`` (weekday means, Monday
first), ``finished_share`` and ``span``, so a chart or a person can say what was assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from durability import simulate
from durability.analyses.common import frame_of
from durability.clock import as_utc
from durability.errors import ConfigError
from durability.stores.base import Store
from durability.vocabulary import IN_FORCE, PROPOSED

_DAY = timedelta(days=1)


def _write_history(
    store: Store, threads: pd.DataFrame, start: datetime, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes written per day of the window (counted in the store), and the first write of each
    thread (its ``first_at``), in microseconds."""
    start_us = int(start.timestamp() * 1_000_000)
    day_us = 86_400_000_000
    answer = store.scans.written_per_bucket(start_us, day_us, window)
    written = np.zeros(window, dtype=np.int64)
    written[np.array(answer["bucket"], dtype=np.int64)] = answer["size_bytes"]
    first_at = pd.to_datetime(threads["first_at"], utc=True).dropna()
    firsts = np.sort(first_at.to_numpy(dtype="datetime64[us]").astype(np.int64))
    return written, firsts


def _by_weekday(values: np.ndarray, start: datetime) -> np.ndarray:
    """Mean of a per-day series by weekday (Monday first); a weekday the window lacks is the
    overall mean."""
    weekdays = (start.weekday() + np.arange(len(values))) % 7
    overall = float(values.mean()) if len(values) else 0.0
    return np.array(
        [
            float(values[weekdays == w].mean()) if (weekdays == w).any() else overall
            for w in range(7)
        ]
    )


def fit(store: Store, threads: pd.DataFrame, now: datetime, window: int = 28) -> dict[str, object]:
    """The write model of the last ``window`` days (see the module): ``bytes_per_day``,
    ``threads_per_day`` (7 weekday means, Monday first), ``finished_share`` and ``span``."""
    if window < 1:
        raise ConfigError(f"cannot fit the write history of {window} days: use at least 1")
    start = now - window * _DAY
    written, firsts = _write_history(store, threads, start, window)
    start_us = int(start.timestamp() * 1_000_000)
    new_days = (firsts[firsts >= start_us] - start_us) // 86_400_000_000
    new_per_day = np.bincount(new_days[new_days < window], minlength=window)[:window]
    first_at = pd.to_datetime(threads["first_at"], utc=True)
    recent = threads[(first_at >= pd.Timestamp(start)) & (first_at < pd.Timestamp(now))]
    spans = pd.to_datetime(recent["newest_at"], utc=True) - pd.to_datetime(
        recent["first_at"], utc=True
    )
    return {
        "bytes_per_day": _by_weekday(written.astype(float), start),
        "threads_per_day": _by_weekday(new_per_day.astype(float), start),
        "finished_share": float(recent["finished_at"].notna().mean()) if len(recent) else 0.0,
        "span": spans.median().to_pytimedelta() if len(recent) else timedelta(0),
        "window": window,
    }


def forecast(
    store: Store,
    policies: Sequence[simulate.PolicyLike] | None = None,
    *,
    days: int = 90,
    now: datetime | None = None,
    window: int = 28,
    threads: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Bytes and threads the store holds each day for ``days`` days, per policy
    (``COLUMNS["forecast"]``: ``policy``, ``role``, ``day``, ``threads``, ``size_bytes``).

    ``policies`` default to the store's settings (in force); the first is taken as in force,
    the others as proposed (``role``). ``now`` defaults to the store's clock; ``window`` is the
    write history the model is fitted on (days). The model is the module's; ``attrs`` hold it.
    ``threads`` is ``frames.threads(store, now=now)`` when the caller has it (else it is read).
    """
    if days < 1:
        raise ConfigError(f"cannot forecast {days} days: give days >= 1")
    from durability import frames

    at = as_utc(now) if now is not None else store.clock()
    chosen = [simulate.as_policy(p) for p in (policies or [store.settings])]
    if threads is None:
        threads = frames.threads(store, now=at)
    model = fit(store, threads, at, window)
    existing = simulate.daily(threads, chosen, at, days)
    weekdays = (at.weekday() + np.arange(days)) % 7
    written = np.asarray(model["bytes_per_day"])[weekdays]
    started = np.asarray(model["threads_per_day"])[weekdays]
    share, span = float(model["finished_share"]), model["span"]  # type: ignore[arg-type]
    rows = []
    for index, policy in enumerate(chosen):
        kept_bytes, kept_threads = _cohorts(written, started, share, span, policy)  # type: ignore[arg-type]
        mine = existing[existing["policy"] == policy.label]
        remaining = mine["remaining_threads"].to_numpy()
        remaining_bytes = mine["remaining_bytes"].to_numpy()
        stamps = mine["day"].tolist()
        for day in range(days):
            rows.append(
                {
                    "policy": policy.label,
                    "role": IN_FORCE if index == 0 else PROPOSED,
                    "day": stamps[day],
                    "threads": int(remaining[day]) + round(kept_threads[day]),
                    "size_bytes": int(remaining_bytes[day]) + round(kept_bytes[day]),
                }
            )
    frame = frame_of(rows, "forecast")
    frame.attrs.update(model)
    return frame


def _cohorts(
    written: np.ndarray,
    started: np.ndarray,
    share: float,
    span: timedelta,
    policy: simulate.Policy,
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and threads of the coming days' writes still held on each day: day ``c``'s
    writes are held on day ``d >= c`` while ``d - c`` is under their life (in whole days)."""
    days = len(written)
    lives = [
        (share, (span + policy.finished) / _DAY),
        (1.0 - share, (span + policy.waiting) / _DAY),
    ]
    age = np.arange(days)[:, None] - np.arange(days)[None, :]  # [day, cohort]
    held = np.zeros((days, days))
    for weight, life in lives:
        held += weight * ((age >= 0) & (age < life))
    return held @ written, held @ started


def crossing(frame: pd.DataFrame, size_bytes: int) -> dict[str, pd.Timestamp | None]:
    """The first day each policy of a :func:`forecast` frame holds ``size_bytes`` or more
    (``None``: not within the forecast)."""
    out: dict[str, pd.Timestamp | None] = {}
    for policy, rows in frame.groupby("policy", sort=False):
        over = rows[rows["size_bytes"] >= size_bytes]
        out[str(policy)] = None if over.empty else over["day"].iloc[0]
    return out


__all__ = ["crossing", "fit", "forecast"]
