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
from typing import Any

import numpy as np
import pandas as pd

from durability import simulate
from durability.analyses.common import frame_of
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
    """The store's writes per thread and sweep bucket, sparse: one entry per (thread, bucket)
    written in (``thread`` the thread's row, ``bucket`` as :meth:`thread_buckets` numbers
    them, in thread then bucket order), and per thread (rows, in thread id order) its id,
    owner, finished mark and declared caps."""

    ids: list[str]
    owners: list[str | None]
    thread: np.ndarray
    bucket: np.ndarray
    bytes: np.ndarray
    newest: np.ndarray
    oldest: np.ndarray
    finished: np.ndarray
    waiting_cap: np.ndarray
    finished_cap: np.ndarray


def _us(value: datetime) -> int:
    return int(as_utc(value).timestamp() * 1_000_000)


def _ints(values: list[Any], fill: int) -> np.ndarray:
    """Integers (``None``: ``fill``) as an int64 array, filled by numpy, not a Python loop."""
    found = np.array(values, dtype=object)
    found[found == None] = fill  # noqa: E711 - elementwise on an object array
    return found.astype(np.int64)


def _history(store: Store, sweeps: np.ndarray) -> _History:
    """Read the writes per (thread, bucket) from the store: one aggregate, never the rows."""
    answer = store.scans.thread_buckets(int(sweeps[0]), _DAY_US, len(sweeps))
    names = answer["thread_id"]
    new = np.ones(len(names), dtype=bool)
    if len(names) > 1:
        new[1:] = np.array(names[1:], dtype=object) != np.array(names[:-1], dtype=object)
    firsts = np.flatnonzero(new)
    never = np.iinfo(np.int64).max
    first = firsts.tolist()

    def per_thread(column: str, fill: int) -> np.ndarray:
        return _ints([answer[column][i] for i in first], fill)

    return _History(
        [names[i] for i in first],
        [answer["owner"][i] for i in first],
        np.cumsum(new) - 1,
        _ints(answer["bucket"], 0),
        _ints(answer["size_bytes"], 0),
        _ints(answer["newest_at"], _NONE),
        _ints(answer["oldest_at"], _NONE),
        per_thread("finished_at", _NONE),
        per_thread("declared_waiting", never),
        per_thread("declared_finished", never),
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
    # Each thread's first write bucket after the sweep replayed (and that bucket's oldest write).
    follows = np.append(h.thread[1:] == h.thread[:-1], False)  # the next entry is the same thread
    coming = np.full(n, _NONE, dtype=np.int64)
    coming_at = np.full(n, _NONE, dtype=np.int64)
    starts = np.flatnonzero(np.append(True, h.thread[1:] != h.thread[:-1]))[: len(h.thread)]
    coming[h.thread[starts]], coming_at[h.thread[starts]] = h.bucket[starts], h.oldest[starts]
    by_bucket = np.argsort(h.bucket, kind="stable")
    edges = np.searchsorted(h.bucket[by_bucket], np.arange(len(sweeps) + 1))
    per_day, cuts = [], []
    for k, at in enumerate(sweeps):
        here = by_bucket[edges[k] : edges[k + 1]]
        rows = h.thread[here]
        held[rows] += h.bytes[here]
        last[rows] = np.maximum(last[rows], h.newest[here])
        nxt = here + 1
        has = follows[here]
        coming[rows] = np.where(has, h.bucket[np.minimum(nxt, len(h.bucket) - 1)], _NONE)
        coming_at[rows] = np.where(has, h.oldest[np.minimum(nxt, len(h.oldest) - 1)], _NONE)
        alive = last != _NONE
        marked = (h.finished != _NONE) & (h.finished <= at) & (h.finished >= since)
        due = np.where(marked, h.finished + finished, last + waiting)
        going = alive & (due <= at)
        cut = going & (coming != _NONE)
        cuts += [(int(i), k, int(last[i]), int(coming_at[i])) for i in np.flatnonzero(cut)]
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
                    "owner": h.owners[i],
                    "deleted_on": stamps[k],
                    "last_before": pd.Timestamp(before, unit="us", tz="UTC"),
                    "next_turn": pd.Timestamp(after, unit="us", tz="UTC"),
                    "gap": pd.Timedelta(microseconds=after - before),
                }
            )
    frame = frame_of(rows, "backtest")
    longer = policies[1][0].waiting > policies[0][0].waiting
    frame.attrs.update(caveat=CAVEAT, longer_than_in_force=longer)
    return Backtest(frame, frame_of(cut_rows, "cut_conversations"))


__all__ = ["CAVEAT", "Backtest", "backtest"]
