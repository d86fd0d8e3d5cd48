"""The retention planner's aggregate paths (issue 16) on the bulk store of ``test_scale``.

The write-history aggregates are checked against sums by hand and the SQL statements against
the chunked defaults every other provider uses; the backtest and the forecast's write model
read from them are checked against the row-by-row computation they replace, and the sampled
thin-or-delete frame against the whole one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import durability
from durability import analyses, frames, simulate
from durability.analyses import charts
from durability.analyses.forecast import fit
from durability.errors import ConfigError
from durability.frames.columns import MAX_ROWS_ENV
from durability.model import Checkpoint
from durability.settings import Settings
from durability.stores.base import Store
from durability.stores.scans import Scans
from durability.stores.write_history import WriteHistory, bucket_of
from durability.sweep import plan_sweep
from durability.sweep.thin import thin_vs_delete
from durability.testing import StoreTarget
from tests.test_scale import PER_THREAD, T0, THREADS, Bulk, bulk  # noqa: F401 - the fixture

DAY_US = 86_400_000_000
T0_US = int(T0.timestamp() * 1_000_000)
#: Threads written to again nine days on: a sweep in between cuts their conversation.
RETURNING = range(0, THREADS, 100)
LATE_US = T0_US + 9 * DAY_US


@pytest.fixture(scope="module")
def history(bulk: Bulk) -> Bulk:  # noqa: F811 - the fixture imported above
    """The bulk store with returning threads, finished marks and a declared waiting value."""
    with durability.open(bulk.url) as store:
        for t in RETURNING:
            at = T0 + timedelta(microseconds=LATE_US - T0_US + t)
            store.put(Checkpoint(thread_id=f"t-{t:05d}", checkpoint_id="late", created_at=at))
    import sqlite3

    db = sqlite3.connect(bulk.url.removeprefix("sqlite:///"))
    db.execute(
        "UPDATE durability_threads SET finished_at = started_at + 86400000000 * 2 "
        "WHERE thread_id LIKE '%3'"
    )
    db.execute(
        "UPDATE durability_threads SET declared_waiting = 86400000000 WHERE thread_id LIKE '%7'"
    )
    db.commit()
    db.close()
    return bulk


@pytest.fixture
def store(history: Bulk) -> Iterator[Store]:
    with durability.open(history.url) as opened:
        yield opened


def _writes(store: Store) -> list[tuple[str, int, int]]:
    """Every checkpoint's (thread, created_at, size), read row by row."""
    names = ("thread_id", "created_at", "size_bytes")
    return [
        (t, int(c), int(s))
        for chunk in store.checkpoint_columns(columns=names)
        for t, c, s in zip(*(chunk[n] for n in names), strict=True)
    ]


def test_written_per_bucket_is_the_sums_by_hand(store: Store) -> None:
    origin, step, buckets = T0_US + 3_600_000_000, 6 * 3_600_000_000, 30
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for _t, at, size in _writes(store):
        if origin <= at < origin + step * buckets:
            sums[(at - origin) // step][0] += 1
            sums[(at - origin) // step][1] += size
    answer = store.scans.written_per_bucket(origin, step, buckets)
    assert answer == {
        "bucket": sorted(sums),
        "checkpoints": [sums[k][0] for k in sorted(sums)],
        "size_bytes": [sums[k][1] for k in sorted(sums)],
    }
    assert answer == WriteHistory._written_per_bucket(store.scans, origin, step, buckets)


def test_thread_buckets_are_the_sums_by_hand(store: Store) -> None:
    origin, step, buckets = T0_US + DAY_US, DAY_US, 8
    groups: dict[tuple[str, int], list[int]] = {}
    for thread_id, at, size in _writes(store):
        entry = groups.setdefault((thread_id, bucket_of(at, origin, step, buckets)), [0, at, at])
        entry[0] += size
        entry[1], entry[2] = max(entry[1], at), min(entry[2], at)
    answer = store.scans.thread_buckets(origin, step, buckets)
    keys = sorted(groups)
    assert list(zip(answer["thread_id"], answer["bucket"], strict=True)) == keys
    assert answer["size_bytes"] == [groups[k][0] for k in keys]
    assert answer["newest_at"] == [groups[k][1] for k in keys]
    assert answer["oldest_at"] == [groups[k][2] for k in keys]
    assert set(answer["bucket"]) >= {0, buckets}  # before the grid, and after it
    marked = {t for t, f in zip(answer["thread_id"], answer["finished_at"], strict=True) if f}
    assert marked
    assert all(t.endswith("3") for t in marked)
    assert answer == WriteHistory._thread_buckets(store.scans, origin, step, buckets)


def _reference_backtest(store: Store, sweeps: np.ndarray, policy: simulate.Policy) -> Any:
    """The replay as it was before the aggregate: a dense thread x bucket matrix of the rows."""
    threads = frames.threads(store)
    row = {t: i for i, t in enumerate(threads["thread_id"].astype(str))}
    none, never = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    shape = (len(row), len(sweeps) + 1)
    written, newest = np.zeros(shape, np.int64), np.full(shape, none, np.int64)
    oldest = np.full(shape, never, np.int64)
    for thread_id, at, size in _writes(store):
        i, k = row[thread_id], int(np.searchsorted(sweeps, at, side="left"))
        written[i, k] += size
        newest[i, k], oldest[i, k] = max(newest[i, k], at), min(oldest[i, k], at)
    finished = pd.to_datetime(threads["finished_at"], utc=True)
    finished_us = np.where(finished.isna(), none, finished.astype("int64") // 1000)
    spans = pd.to_timedelta(threads["declared_waiting"])
    cap = np.where(spans.isna(), never, spans.astype("int64") // 1000)
    waiting = np.minimum(int(policy.waiting / timedelta(microseconds=1)), cap)
    finished_for = int(policy.finished / timedelta(microseconds=1))
    held, last = np.zeros(len(row), np.int64), np.full(len(row), none, np.int64)
    since = np.full(len(row), none, np.int64)
    days, cuts = [], []
    for k, at in enumerate(sweeps):
        held += written[:, k]
        last = np.maximum(last, newest[:, k])
        alive = last != none
        marked = (finished_us != none) & (finished_us <= at) & (finished_us >= since)
        going = alive & (np.where(marked, finished_us + finished_for, last + waiting) <= at)
        later = newest[:, k + 1 :] != none
        cut = going & later.any(axis=1)
        for i in np.flatnonzero(cut):
            j = k + 1 + int(np.argmax(later[i]))
            cuts.append((threads["thread_id"].iloc[i], k, int(last[i]), int(oldest[i, j])))
        held[going], last[going], since[going] = 0, none, at
        alive &= ~going
        days.append((int(alive.sum()), int(held.sum()), int(going.sum()), int(cut.sum())))
    return days, cuts


def test_backtest_from_the_aggregate_is_the_row_by_row_replay(store: Store) -> None:
    now = T0 + timedelta(days=11, hours=5)
    proposed, in_force = simulate.Policy("2d", "1d"), simulate.Policy("30d", "7d")
    result = analyses.backtest(store, proposed, in_force=in_force, days=12, now=now)
    sweeps = int(now.timestamp() * 1e6) - DAY_US * np.arange(11, -1, -1, dtype=np.int64)
    for policy in (in_force, proposed):
        days, cuts = _reference_backtest(store, sweeps, policy)
        mine = result.days[result.days.policy == policy.label]
        columns = ["threads", "size_bytes", "deleted_threads", "cut_conversations"]
        assert [tuple(r) for r in mine[columns].itertuples(index=False)] == days
        got = result.cuts[result.cuts.policy == policy.label]
        assert list(got.thread_id) == [c[0] for c in cuts]
        assert [int(t.value // 1000) for t in got.next_turn] == [c[3] for c in cuts]
    assert len(result.cuts[result.cuts.policy == proposed.label]) > 0  # the returning threads


def test_forecast_write_model_is_the_row_by_row_one(store: Store) -> None:
    now = T0 + timedelta(days=9, hours=2)
    threads = frames.threads(store, now=now)
    model = fit(store, threads, now, window=7)
    start_us = int(now.timestamp() * 1e6) - 7 * DAY_US
    written = np.zeros(7)
    firsts: dict[str, int] = {}
    for thread_id, at, size in _writes(store):
        firsts[thread_id] = min(firsts.get(thread_id, at), at)
        if 0 <= (at - start_us) // DAY_US < 7:
            written[(at - start_us) // DAY_US] += size
    weekday = ((now - timedelta(days=7)).weekday() + np.arange(7)) % 7
    expected = np.zeros(7)
    expected[weekday] = written
    assert model["bytes_per_day"].tolist() == expected.tolist()
    new = np.bincount(
        [(f - start_us) // DAY_US for f in firsts.values() if f >= start_us], minlength=7
    )[:7]
    assert np.asarray(model["threads_per_day"])[weekday].tolist() == new.tolist()
    again = analyses.forecast(store, [Settings()], days=5, now=now, threads=threads)
    pd.testing.assert_frame_equal(again, analyses.forecast(store, [Settings()], days=5, now=now))


def test_thin_or_delete_of_a_sample_is_the_whole_frame_s_rows(store: Store) -> None:
    now = T0 + timedelta(days=40)
    settings = Settings(waiting_retention="30d", finished_retention="7d")
    plan = plan_sweep(store, settings, now)
    whole = thin_vs_delete(store, keep_latest=1, settings=settings, now=now)
    sampled = thin_vs_delete(store, keep_latest=1, sample=50, seed=2, plan=plan)
    assert len(sampled) == 50
    assert sampled.attrs["sample"] == 50
    expected = whole[whole.thread_id.isin(set(sampled.thread_id))].reset_index(drop=True)
    pd.testing.assert_frame_equal(sampled, expected, check_like=False)
    for name in ("threads", "due_threads", "delete_frees"):
        assert sampled.attrs[name] == whole.attrs[name]
    assert whole.attrs["delete_frees"] == int(whole["delete_frees"].sum())
    assert whole.attrs["sample"] is None
    fig = charts.thin_vs_delete_chart(sampled)
    assert "sample of 50 threads" in fig.get_suptitle()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(f"a sample of 50 of {whole.attrs['threads']:,} threads" in x for x in labels)


def test_a_plan_counted_and_shown_in_part_is_the_whole_frame(store: Store) -> None:
    """``groups()`` is the whole plan frame grouped by horizon and action; ``to_frame(action,
    limit)`` its first rows of that action, in the plan's order."""
    plan = plan_sweep(store, Settings(waiting_retention="5d"), T0 + timedelta(days=12))
    whole = plan.to_frame()
    by_hand = whole.groupby(["horizon", "action"], sort=False).agg(
        threads=("thread_id", "size"),
        checkpoints=("checkpoints", "sum"),
        size_bytes=("size_bytes", "sum"),
    )
    groups = plan.groups()
    assert set(groups.index) == set(by_hand.index)
    assert groups.loc[by_hand.index].values.tolist() == by_hand.values.tolist()
    assert groups["threads"].sum() == len(whole) == THREADS
    going = whole[whole.action == "delete"].reset_index(drop=True)
    assert 10 < len(going) < len(whole)
    pd.testing.assert_frame_equal(plan.to_frame(action="delete", limit=10), going.head(10))
    pd.testing.assert_frame_equal(plan.to_frame(action="delete"), going)
    pd.testing.assert_frame_equal(plan.to_frame(limit=7), whole.head(7))


def test_lost_threads_look_up_only_the_plane_s_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread the store knows (a checkpoint, or only a ledger record) is not lost; the store
    is asked about the plane's ids alone, never read whole."""
    from durability import restore

    def whole(*_: object, **__: object) -> None:
        raise AssertionError("lost_threads read the whole store")

    monkeypatch.setattr(frames, "threads", whole)
    monkeypatch.setattr(Scans, "thread_columns", whole)
    monkeypatch.setattr(Scans, "checkpoint_columns", whole)
    with durability.open(f"sqlite:///{tmp_path / 's.db'}") as local:
        local.put(Checkpoint(thread_id="kept"))
        local.ledger.record_run_start("ledger-only", run_id="run-l", owner="me")
        plane = pd.DataFrame(
            {
                "thread_id": ["kept", "ledger-only", "gone", "gone"],
                "run_id": ["r1", "r2", "r3", "r4"],
                "status": ["failed", "failed", "completed", "failed"],
                "started_at": pd.to_datetime([1, 2, 3, 4], unit="s", utc=True),
            }
        )
        lost = restore.lost_threads(plane, local)
    assert lost.thread_id.tolist() == ["gone"]
    assert lost.run_id.tolist() == ["r4"]  # its latest run
    assert lost.resumable.tolist() == [True]


def test_a_retention_frame_past_the_cap_is_refused_naming_the_plan_s_counts(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``frames.retention`` of more threads than the cap stops and names ``groups()`` and
    ``to_frame(action=..., limit=N)``; under the cap it is the whole plan."""
    now = T0 + timedelta(days=12)
    monkeypatch.setenv(MAX_ROWS_ENV, str(THREADS - 1))
    with pytest.raises(ConfigError, match=r"frames\.retention.*groups\(\).*limit=N"):
        frames.retention(store, Settings(), now)
    monkeypatch.setenv(MAX_ROWS_ENV, str(THREADS))
    whole = frames.retention(store, Settings(), now)
    assert len(whole) == plan_sweep(store, Settings(), now).thread_count == THREADS


def test_thinning_a_few_threads_asks_the_outbox_about_them_alone(
    bulk: Bulk,  # noqa: F811 - the fixture imported above
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rows the plane lacks protect a chosen thread's checkpoints as they do in the whole
    plan, and the outbox is asked thread by thread, never listed whole."""
    from durability.stores.outbox import Outbox
    from durability.sweep.thin import plan_thin

    unsent = bulk.pending | bulk.quarantined
    chosen = [*sorted({t for t, *_, seq, _o in bulk.rows if seq in unsent})[-5:], "t-00002"]
    whole = {r.thread_id: r for r in plan_thin(store, keep_latest=1).rows}
    entries = Outbox.entries

    def by_thread(self: Outbox, **query: Any) -> Any:
        assert query.get("thread_id") is not None, "the whole outbox was listed"
        return entries(self, **query)

    monkeypatch.setattr(Outbox, "entries", by_thread)
    monkeypatch.setattr(Outbox, "__call__", by_thread)
    few = plan_thin(store, keep_latest=1, threads=chosen)
    chosen.sort()
    assert [r.thread_id for r in few.rows] == chosen
    assert list(few.rows) == [whole[t] for t in chosen]
    assert any(r.checkpoints - r.dropped > 2 for r in few.rows)  # unsent rows kept


#: What ``frames.threads(lean=True)`` leaves out.
COSTLY = ["run_id", "status", "max_idle_gap"]


def test_lean_threads_and_the_sampled_gaps_are_the_whole_frame_s(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``threads(lean=True)`` is the frame without its costly columns (threads the ledger lacks
    included); ``idle_gaps`` gives the frame's gaps back, for every thread or a sample of them
    read by id, and says so."""
    from durability import plots

    now = T0 + timedelta(days=12)
    whole = frames.threads(store, now=now).drop(columns=COSTLY[:2])
    bare = frames.threads(store, now=now, lean=True)
    assert bare.owner.isna().any(), "threads the ledger lacks"
    pd.testing.assert_frame_equal(bare, whole.drop(columns="max_idle_gap"))
    every = frames.idle_gaps(store, bare, sample=None)
    pd.testing.assert_frame_equal(every, whole)
    assert every.attrs["sample"] is None
    assert whole.max_idle_gap.max() > pd.Timedelta(days=8)  # the returning threads
    asked: list[str | None] = []
    read = Scans.checkpoint_columns

    def by_id(self: Scans, thread_id: str | None = None, **kwargs: Any) -> Any:
        asked.append(thread_id)
        return read(self, thread_id, **kwargs)

    monkeypatch.setattr(Scans, "checkpoint_columns", by_id)
    sampled = frames.idle_gaps(store, bare, sample=40, seed=3)
    assert sampled.attrs["sample"] == {"threads": 40, "of": THREADS}
    assert sorted(asked) == sampled.thread_id.tolist()  # each picked thread, by id
    expected = whole[whole.thread_id.isin(set(sampled.thread_id))].reset_index(drop=True)
    pd.testing.assert_frame_equal(sampled, expected)
    fig = plots.idle_gaps(sampled, "7d")
    assert f"a sample of 40 of {THREADS:,} threads" in fig.get_suptitle()
    with pytest.raises(ConfigError, match="sample=0"):
        frames.idle_gaps(store, bare, sample=0)


def test_lean_threads_hold_the_ledger_only_and_unledgered_threads(
    target: StoreTarget,
) -> None:
    """On every provider, a lean frame is the whole one without its costly columns, a thread
    known only by its ledger record and one with checkpoints and no record included."""
    with target.open() as store:
        store.put(Checkpoint(thread_id="rows-only", checkpoint_id="a"))
        store.put(Checkpoint(thread_id="rows-only", checkpoint_id="b"))
        store.ledger.record_run_start("both", run_id="run-b", owner="me")
        store.put(Checkpoint(thread_id="both", checkpoint_id="a", run_id="run-b"))
        store.ledger.record_run_start("ledger-only", run_id="run-l", owner="me")
        whole = frames.threads(store)
        lean = frames.threads(store, lean=True)
        gaps = frames.idle_gaps(store, lean, sample=None)
    assert lean.thread_id.tolist() == ["both", "ledger-only", "rows-only"]
    pd.testing.assert_frame_equal(lean, whole.drop(columns=COSTLY))
    pd.testing.assert_frame_equal(gaps, whole.drop(columns=COSTLY[:2]))


def test_thread_buckets_come_in_code_point_order_of_ids(target: StoreTarget) -> None:
    """The answer is in thread id order as Python sorts ids (code points): the SQL store sorts
    it (binary order, Postgres's "C" collation, so not the database's locale), the others in
    Python."""
    ids = ["b", "B", "a-1", "a", "é", "Z", "_z"]
    with target.open() as store:
        for thread_id in ids:
            store.put(Checkpoint(thread_id=thread_id, checkpoint_id="c"))
        answer = store.scans.thread_buckets(0, DAY_US, 3)
    assert answer["thread_id"] == sorted(ids)
