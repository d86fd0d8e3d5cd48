"""Retention backtest: replay the store's last days against a policy, sweep by sweep.

One sweep a day at the time of day of ``now``, over the last ``days`` days, for the policy in
force and a proposed one, both replayed on the same checkpoints so they compare fairly. At each
sweep a thread goes when it is due — a thread marked finished by then its finished value after
the mark, any other its waiting value after its newest checkpoint before the sweep (a value the
thread declared caps the policy's, as in :mod:`durability.settings`) — and holds nothing until
its next write. A thread deleted while its conversation went on (a later checkpoint exists) is a
**cut conversation**: the user came back to nothing.

What it cannot see, and says (``attrs["caveat"]``): a store only remembers what its current
policy kept, so a policy *longer* than the one in force is judged only on the threads still
there; parks and leases of the past are not recorded, so none spares a thread here; a thread's
finished mark is its current one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from durability import simulate
from durability.analyses.common import frame_of, header_chunks
from durability.clock import as_utc
from durability.errors import ConfigError
from durability.stores.base import Store
from durability.vocabulary import IN_FORCE, PROPOSED

_DAY_US = 86_400_000_000
_NONE = np.iinfo(np.int64).min

#: What the backtest cannot judge, written on its chart.
CAVEAT = (
    "a store only remembers what its current policy kept: a policy longer than the one in force "
    "is judged only on the threads still there"
)


@dataclass
class Backtest:
    """The replay: ``days`` (``COLUMNS["backtest"]``, one row per policy and sweep) and ``cuts``
    (``COLUMNS["cut_conversations"]``, one row per conversation cut between two turns)."""

    days: pd.DataFrame
    cuts: pd.DataFrame


@dataclass
class _History:
    """Per thread (rows) and sweep bucket (columns): bytes written, newest and oldest write."""

    ids: list[str]
    bytes: np.ndarray
    newest: np.ndarray
    oldest: np.ndarray
    finished: np.ndarray
    waiting_cap: np.ndarray
    finished_cap: np.ndarray


def _us(value: datetime) -> int:
    return int(as_utc(value).timestamp() * 1_000_000)


def _history(store: Store, sweeps: np.ndarray) -> _History:
    from durability import frames

    threads = frames.threads(store)
    ids = threads["thread_id"].astype(str).tolist()
    row = {tid: i for i, tid in enumerate(ids)}
    shape = (len(ids), len(sweeps) + 1)
    written = np.zeros(shape, dtype=np.int64)
    newest = np.full(shape, _NONE, dtype=np.int64)
    oldest = np.full(shape, np.iinfo(np.int64).max, dtype=np.int64)
    names = ("thread_id", "created_at", "size_bytes")
    for chunk in header_chunks(store, names):
        keep = [
            i
            for i, (t, c) in enumerate(zip(chunk["thread_id"], chunk["created_at"], strict=True))
            if c is not None and t in row
        ]
        rows = np.array([row[chunk["thread_id"][i]] for i in keep], dtype=np.int64)
        created = np.array([chunk["created_at"][i] for i in keep], dtype=np.int64)
        sizes = np.array([int(chunk["size_bytes"][i] or 0) for i in keep], dtype=np.int64)
        bucket = np.searchsorted(sweeps, created, side="left")  # bucket k: after sweep k-1
        np.add.at(written, (rows, bucket), sizes)
        np.maximum.at(newest, (rows, bucket), created)
        np.minimum.at(oldest, (rows, bucket), created)

    def micros(column: str, fill: int) -> np.ndarray:
        values = pd.to_datetime(threads[column], utc=True)
        return np.where(values.isna(), fill, values.astype("int64") // 1000)

    def caps(column: str) -> np.ndarray:
        spans = pd.to_timedelta(threads[column])
        return np.where(spans.isna(), np.iinfo(np.int64).max, spans.astype("int64") // 1000)

    return _History(
        ids,
        written,
        newest,
        oldest,
        micros("finished_at", _NONE),
        caps("declared_waiting"),
        caps("declared_finished"),
    )


def _replay(
    h: _History, sweeps: np.ndarray, policy: simulate.Policy
) -> tuple[list[dict[str, int]], list[tuple[int, int, int, int]]]:
    """Sweep by sweep: (threads, bytes, deleted, cut) per sweep, and the cuts
    (thread row, sweep index, newest before, next turn)."""
    waiting = np.minimum(int(policy.waiting / timedelta(microseconds=1)), h.waiting_cap)
    finished = np.minimum(int(policy.finished / timedelta(microseconds=1)), h.finished_cap)
    n = len(h.ids)
    held = np.zeros(n, dtype=np.int64)
    last = np.full(n, _NONE, dtype=np.int64)
    since = np.full(n, _NONE, dtype=np.int64)  # when the thread last came back (a restart)
    per_day, cuts = [], []
    for k, at in enumerate(sweeps):
        held += h.bytes[:, k]
        last = np.maximum(last, h.newest[:, k])
        alive = last != _NONE
        marked = (h.finished != _NONE) & (h.finished <= at) & (h.finished >= since)
        due = np.where(marked, h.finished + finished, last + waiting)
        going = alive & (due <= at)
        later = h.newest[:, k + 1 :] != _NONE
        cut = going & later.any(axis=1)
        for i in np.flatnonzero(cut):
            j = k + 1 + int(np.argmax(later[i]))
            cuts.append((int(i), k, int(last[i]), int(h.oldest[i, j])))
        held[going], last[going] = 0, _NONE
        since[going] = at
        alive &= ~going
        per_day.append(
            {
                "threads": int(alive.sum()),
                "size_bytes": int(held.sum()),
                "deleted_threads": int(going.sum()),
                "cut_conversations": int(cut.sum()),
            }
        )
    return per_day, cuts


def backtest(
    store: Store,
    proposed: simulate.PolicyLike | timedelta | str,
    *,
    in_force: simulate.PolicyLike | None = None,
    days: int = 28,
    now: datetime | None = None,
) -> Backtest:
    """Replay the last ``days`` days (one sweep a day, the last at ``now``, default the store's
    clock) under the policy in force (default the store's settings) and ``proposed``; see the
    module for the rules and what the replay cannot see (``days.attrs["caveat"]``)."""
    if days < 1:
        raise ConfigError(f"cannot replay {days} days: give days >= 1")
    at = as_utc(now) if now is not None else store.clock()
    policies = [
        (simulate.as_policy(in_force or store.settings), IN_FORCE),
        (simulate.as_policy(proposed), PROPOSED),
    ]
    sweeps = _us(at) - _DAY_US * np.arange(days - 1, -1, -1, dtype=np.int64)
    h = _history(store, sweeps)
    stamps = pd.to_datetime(sweeps, unit="us", utc=True)
    rows, cut_rows = [], []
    for policy, role in policies:
        per_day, cuts = _replay(h, sweeps, policy)
        for k, entry in enumerate(per_day):
            rows.append({"policy": policy.label, "role": role, "day": stamps[k], **entry})
        for i, k, before, after in cuts:
            cut_rows.append(
                {
                    "policy": policy.label,
                    "thread_id": h.ids[i],
                    "deleted_on": stamps[k],
                    "last_before": pd.Timestamp(before, unit="us", tz="UTC"),
                    "next_turn": pd.Timestamp(after, unit="us", tz="UTC"),
                    "gap": pd.Timedelta(microseconds=after - before),
                }
            )
    frame = frame_of(rows, "backtest")
    longer = policies[1][0].waiting > policies[0][0].waiting
    frame.attrs.update(caveat=CAVEAT, longer_than_in_force=longer)
    return Backtest(frame, _with_owner(store, frame_of(cut_rows, "cut_conversations")))


def _with_owner(store: Store, cuts: pd.DataFrame) -> pd.DataFrame:
    from durability.analyses.common import thread_chunks

    owners = {
        t: o
        for chunk in thread_chunks(store, ("thread_id", "owner"))
        for t, o in zip(chunk["thread_id"], chunk["owner"], strict=True)
    }
    cuts["owner"] = pd.array([owners.get(t) for t in cuts["thread_id"]], dtype="string")
    return cuts


__all__ = ["CAVEAT", "Backtest", "backtest"]
