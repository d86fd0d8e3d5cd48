"""durability.simulate: what a sweep would delete under candidate retention values, and more."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_frames import checkpoints_frame, parks_frame, thread, threads_frame
from conftest import REPLICATED_DEMO_END

import durability
from durability import frames
from durability.clock import FrozenClock
from durability.demo import DEMO_START, build_demo
from durability.errors import ConfigError
from durability.settings import Retention, Settings, finished_horizon, waiting_horizon
from durability.simulate import (
    DAILY_COLUMNS,
    Policy,
    daily,
    describe_outage,
    kept,
    lost_conversations,
    outage_backlog,
    refused_parks,
)
from durability.sweep import plan_sweep

T0 = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def deleted_on(frame: pd.DataFrame, policy: Policy) -> list[int]:
    """Threads deleted each day under ``policy``."""
    return frame[frame["policy"] == policy.label]["deleted_threads"].tolist()


def first_deletion_day(frame: pd.DataFrame) -> int:
    return int(np.flatnonzero(frame["deleted_threads"].to_numpy())[0])


def test_columns_and_dtypes_are_the_documented_ones() -> None:
    """One row per (policy, day) with DAILY_COLUMNS in order and their dtypes."""
    threads = threads_frame([thread("a", newest_at=T0)])
    policies = [Policy(DAY * 3, DAY), Policy(DAY * 5, DAY * 2)]
    frame = daily(threads, policies, T0, 7)
    assert list(frame.columns) == list(DAILY_COLUMNS)
    assert {c: str(frame[c].dtype) for c in frame.columns} == DAILY_COLUMNS
    assert len(frame) == 14
    assert frame["day"].iloc[:7].tolist() == [pd.Timestamp(T0 + DAY * k) for k in range(7)]
    assert set(frame["policy"]) == {"waiting 3d / finished 1d", "waiting 5d / finished 2d"}


def test_a_waiting_thread_goes_its_waiting_value_after_its_newest_checkpoint() -> None:
    """Deleted by the first daily sweep at or after newest_at + waiting; the others keep it."""
    threads = threads_frame([thread("a", newest_at=T0 + timedelta(hours=6), size=700)])
    short, long = Policy(DAY * 2, DAY), Policy(DAY * 4, DAY)
    frame = daily(threads, [short, long], T0, 10)
    assert deleted_on(frame, short) == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # due day 2 at 06:00
    assert deleted_on(frame, long) == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    rows = frame[frame["policy"] == short.label]
    assert rows["remaining_threads"].tolist() == [1, 1, 1] + [0] * 7
    assert rows["deleted_bytes"].sum() == 700
    assert rows["remaining_bytes"].iloc[-1] == 0
    assert rows["deleted_waiting_threads"].sum() == 1
    assert rows["deleted_finished_threads"].sum() == 0


def test_a_finished_thread_goes_the_policy_finished_value_after_its_mark() -> None:
    """The policy's finished value applies to finished_at (not the stored due_at)."""
    row = thread("f", newest_at=T0, finished_at=T0)
    row["due_at"] = T0 + DAY * 30  # fixed at the mark under another value: ignored by design
    threads = threads_frame([row])
    one, three = Policy(DAY * 10, DAY), Policy(DAY * 10, DAY * 3)
    frame = daily(threads, [one, three], T0, 6)
    assert deleted_on(frame, one) == [0, 1, 0, 0, 0, 0]
    assert deleted_on(frame, three) == [0, 0, 0, 1, 0, 0]
    assert frame["deleted_finished_threads"].sum() == 2


def test_declared_values_shorten_and_the_policy_caps_them() -> None:
    """A declared waiting value shorter than the policy's wins; a longer one is capped at it."""
    threads = threads_frame(
        [
            thread("short", newest_at=T0, declared_waiting=DAY * 2),
            thread("long", newest_at=T0, declared_waiting=DAY * 60),
            thread("none", newest_at=T0),
        ]
    )
    frame = daily(threads, Policy(DAY * 5, DAY), T0, 8)
    assert frame["deleted_threads"].tolist() == [0, 0, 1, 0, 0, 2, 0, 0]


def test_an_unset_declared_finished_is_capped_at_the_declared_waiting() -> None:
    """Seed 004: an unset finished is the platform's, capped at the thread's waiting one."""
    threads = threads_frame([thread("f", newest_at=T0, finished_at=T0, declared_waiting=DAY * 6)])
    frame = daily(threads, Policy(DAY * 30, DAY * 7), T0, 10)
    assert first_deletion_day(frame) == 6  # the mark + min(7d, declared waiting 6d)
    assert frame["deleted_finished_threads"].sum() == 1


def test_a_mark_never_extends_the_waiting_horizon() -> None:
    """A thread marked long after its last checkpoint goes when its waiting horizon passes,
    on the waiting horizon, if that comes before the mark's due time (as the sweep does)."""
    threads = threads_frame([thread("late", newest_at=T0 - DAY * 29, finished_at=T0)])
    frame = daily(threads, Policy(DAY * 30, DAY * 7), T0, 10)
    assert first_deletion_day(frame) == 1  # newest + 30d, not the mark + 7d
    assert frame["deleted_waiting_threads"].sum() == 1
    assert frame["deleted_finished_threads"].sum() == 0


def test_parks_and_live_leases_are_spared_until_they_end() -> None:
    """A thread with an unexpired park or a live lease is deleted at the first sweep after."""
    threads = threads_frame(
        [
            thread("parked", newest_at=T0 - DAY * 9, park_deadline=T0 + DAY * 2),
            thread("leased", newest_at=T0 - DAY * 9, lease_expires_at=T0 + timedelta(hours=1)),
            thread("free", newest_at=T0 - DAY * 9),
        ]
    )
    frame = daily(threads, Policy(DAY * 3, DAY), T0, 5)
    assert frame["deleted_threads"].tolist() == [1, 1, 1, 0, 0]


def test_what_is_due_before_start_goes_at_once_and_later_threads_remain() -> None:
    """The first day's sweep takes the backlog; threads due after the range remain."""
    threads = threads_frame(
        [
            thread("old", newest_at=T0 - DAY * 100, size=10),
            thread("new", newest_at=T0 + DAY, size=20),
        ]
    )
    frame = daily(threads, Policy(DAY * 30, DAY), T0, 5)
    assert frame["deleted_threads"].tolist() == [1, 0, 0, 0, 0]
    assert frame["remaining_threads"].tolist() == [1] * 5
    assert frame["remaining_bytes"].tolist() == [20] * 5


def test_the_simulation_agrees_with_the_settings_rules_thread_by_thread() -> None:
    """For random threads and declared values, the day each thread goes is the day the scalar
    rules of durability.settings give (called here one thread at a time)."""
    rng = random.Random(4)
    rows = []
    for i in range(300):
        declared_w = rng.choice([None, DAY * rng.randint(1, 20), DAY * 45])
        declared_f = rng.choice([None, DAY * rng.randint(1, 5)])
        finished = rng.random() < 0.5
        rows.append(
            thread(
                f"t{i}",
                newest_at=T0 - timedelta(hours=rng.randint(0, 24 * 40)),
                finished_at=T0 - timedelta(hours=rng.randint(0, 24 * 10)) if finished else None,
                declared_waiting=declared_w,
                declared_finished=declared_f,
            )
        )
    threads = threads_frame(rows)
    policy = Policy(DAY * 21, DAY * 4)
    settings = Settings(waiting_retention=policy.waiting, finished_retention=policy.finished)
    start, days = T0, 60
    expected = np.zeros(days, dtype=int)
    for row in rows:
        declared = Retention(row["declared_waiting"], row["declared_finished"])
        due = row["newest_at"] + waiting_horizon(settings, declared)
        if row["finished_at"] is not None:  # a mark never extends the waiting horizon
            due = min(due, row["finished_at"] + finished_horizon(settings, declared))
        day = max(0, -((start - due) // DAY))  # first sweep at or after due
        if day < days:
            expected[day] += 1
    frame = daily(threads, policy, start, days)
    assert frame["deleted_threads"].tolist() == expected.tolist()


def test_policies_from_settings_and_bad_input() -> None:
    """Settings are accepted as policies; no policy, no days or a naive start are refused."""
    threads = threads_frame([thread("a", newest_at=T0)])
    settings = Settings(waiting_retention="2d", finished_retention="1d")
    frame = daily(threads, settings, T0, 4)
    assert frame["policy"].iloc[0] == "waiting 2d / finished 1d"
    assert Policy.from_settings(settings) == Policy(DAY * 2, DAY)
    assert Policy("3d", "12h").finished == timedelta(hours=12)
    with pytest.raises(ConfigError, match="days >= 1"):
        daily(threads, settings, T0, 0)
    with pytest.raises(ConfigError, match="at least one Policy"):
        daily(threads, [], T0, 3)
    with pytest.raises(ConfigError, match="no time zone"):
        daily(threads, settings, datetime(2026, 1, 1), 3)
    with pytest.raises(ConfigError, match="must be longer than 0"):
        Policy(timedelta(0), DAY)
    with pytest.raises(ConfigError, match="lacks the threads columns"):
        daily(pd.DataFrame({"thread_id": ["a"]}), settings, T0, 3)


def test_an_empty_threads_frame_simulates_to_zeros() -> None:
    frame = daily(threads_frame([]), Policy(DAY, DAY), T0.date(), 3)
    assert frame["deleted_threads"].tolist() == [0, 0, 0]
    assert frame["remaining_bytes"].tolist() == [0, 0, 0]


def test_kept_is_what_a_sweep_at_now_keeps() -> None:
    threads = threads_frame(
        [thread("a", newest_at=T0 - DAY * 10, size=5), thread("b", newest_at=T0, size=7)]
    )
    out = kept(threads, [Policy(DAY * 5, DAY), Policy(DAY * 20, DAY)], T0)
    assert out["kept_threads"].tolist() == [1, 2]
    assert out["kept_bytes"].tolist() == [7, 12]
    assert out["deleted_bytes"].tolist() == [5, 0]


# ---------------------------------------------------------------------------- parks


def test_refused_parks_are_those_past_created_at_plus_the_waiting_value() -> None:
    """A park whose deadline runs past created_at + waiting would be refused; the declared
    waiting of its thread caps the value when the threads frame is given."""
    parks = parks_frame(
        [
            {"thread_id": "a", "created_at": T0, "deadline": T0 + DAY * 3},
            {"thread_id": "b", "created_at": T0, "deadline": T0 + DAY * 10},
            {"thread_id": "c", "created_at": T0, "deadline": T0 + DAY * 2},
        ]
    )
    refused = refused_parks(parks, DAY * 5)
    assert refused["thread_id"].tolist() == ["b"]
    assert refused["excess"].tolist() == [pd.Timedelta(days=5)]
    assert refused["allowed_until"].tolist() == [pd.Timestamp(T0 + DAY * 5)]
    threads = threads_frame([thread("c", newest_at=T0, declared_waiting=DAY)])
    capped = refused_parks(parks, DAY * 5, threads=threads)
    assert capped["thread_id"].tolist() == ["b", "c"]
    assert refused_parks(parks, Policy(DAY * 30, DAY)).empty


# ---------------------------------------------------------------------------- idle gaps


def test_lost_conversations_have_an_idle_gap_longer_than_the_horizon() -> None:
    threads = threads_frame(
        [
            thread("chat-1", newest_at=T0, max_idle_gap=DAY * 4),
            thread("chat-2", newest_at=T0, max_idle_gap=DAY * 9),
            thread("chat-3", newest_at=T0, max_idle_gap=DAY * 2, declared_waiting=DAY),
            thread("run", newest_at=T0, max_idle_gap=timedelta(seconds=30)),
        ]
    )
    lost = lost_conversations(threads, DAY * 3)
    assert lost["thread_id"].tolist() == ["chat-2", "chat-1", "chat-3"]  # ties keep their order
    assert lost["excess"].tolist() == [pd.Timedelta(days=d) for d in (6, 1, 1)]
    assert lost_conversations(threads, DAY * 10)["thread_id"].tolist() == ["chat-3"]


# ---------------------------------------------------------------------------- outage


def minutes(n: int) -> timedelta:
    return timedelta(minutes=n)


def test_an_outage_queues_every_row_then_a_fast_drain_empties_it_at_once() -> None:
    """One checkpoint a minute; an hour's outage queues 60 rows; without a rate they go at once."""
    created = [T0 + minutes(i) for i in range(180)]
    frame = outage_backlog(checkpoints_frame(created), T0 + minutes(60), "1h", freq="1min")
    pending = frame.set_index("time")["pending"]
    assert pending[pd.Timestamp(T0 + minutes(60))] == 1
    assert pending[pd.Timestamp(T0 + minutes(119))] == 60
    assert pending[pd.Timestamp(T0 + minutes(120))] == 0
    age = frame.set_index("time")["oldest_pending_age"]
    assert age[pd.Timestamp(T0 + minutes(119))] == pd.Timedelta(minutes=59)
    assert pd.isna(age[pd.Timestamp(T0 + minutes(120))])
    assert frame.attrs["peak_pending"] == 60
    assert frame.attrs["cleared_at"] == pd.Timestamp(T0 + minutes(120))
    assert list(frame.columns) == ["time", "pending", "oldest_pending_age"]
    assert describe_outage(frame) == (
        "a 1h outage from 2026-06-01 01:00 UTC: up to 60 rows waiting, the oldest 59m old; "
        "the outbox is empty again at 2026-06-01 02:00 UTC"
    )


def test_a_drain_rate_sets_how_long_the_backlog_takes_to_clear() -> None:
    """Draining 2 rows a minute while 1 a minute arrives clears a 60-row backlog in an hour."""
    created = [T0 + minutes(i) for i in range(300)]
    frame = outage_backlog(checkpoints_frame(created), T0, minutes(60), 2 / 60, freq="1min")
    assert frame.attrs["cleared_at"] == pd.Timestamp(T0 + minutes(120))
    pending = frame.set_index("time")["pending"]
    assert pending[pd.Timestamp(T0 + minutes(90))] == pytest.approx(30, abs=1)
    slower = outage_backlog(checkpoints_frame(created), T0, minutes(60), 1.5 / 60)
    assert slower.attrs["cleared_at"] > frame.attrs["cleared_at"]


def test_an_outage_with_no_writes_has_no_backlog() -> None:
    frame = outage_backlog(checkpoints_frame([T0 - DAY]), T0, "2h")
    assert frame["pending"].max() == 0
    assert "up to 0 rows waiting, the oldest - old" in describe_outage(frame)
    assert frame.attrs["cleared_at"] == pd.Timestamp(T0 + timedelta(hours=2))
    with pytest.raises(ConfigError, match="positive rate"):
        outage_backlog(checkpoints_frame([T0]), T0, "1h", drain_rate=0)


# ---------------------------------------------------------------------------- against the sweep


@pytest.mark.parametrize("after", [timedelta(days=5), timedelta(days=12), timedelta(days=40)])
def test_the_current_policy_deletes_what_plan_sweep_deletes_on_a_real_store(
    tmp_path: Path, after: timedelta
) -> None:
    """On the demo fleet written by the runner (SQLite), the first simulated sweep of the
    settings in force deletes as many threads per horizon as plan_sweep's preview does."""
    clock = FrozenClock(DEMO_START)
    settings = Settings()
    with durability.open(
        f"sqlite:///{tmp_path / 'demo.db'}", settings=settings, single_worker=True, clock=clock
    ) as store:
        build_demo(store, clock, days=12)
        now = DEMO_START + after
        plan = plan_sweep(store, settings, now)
        first = daily(frames.threads(store, now), settings, now, 1).iloc[0]
    going = plan.summary()["delete"]
    assert first["deleted_finished_threads"] == going["finished"]["threads"]
    assert first["deleted_waiting_threads"] == going["waiting"]["threads"]
    assert first["deleted_bytes"] == plan.summary()["total_delete"]["size_bytes"]
    if after > timedelta(days=10):  # the runs' marks are due 7 days after them
        assert going["finished"]["threads"] > 0
    if after > timedelta(days=30):  # the conversations and parked runs idle past 30 days
        assert going["waiting"]["threads"] > 0


@pytest.mark.parametrize("after", [timedelta(0), timedelta(days=10), timedelta(days=40)])
def test_on_a_replicated_fleet_the_first_day_deletes_what_plan_sweep_deletes(
    replicated_demo: str, after: timedelta
) -> None:
    """On the demo replicated to its plane, threads holding rows the plane lacks (pending or
    quarantined) are spared as the sweep's replication filter spares them: the first simulated
    day deletes the plan's threads and bytes, per horizon, and those threads never go."""
    settings = Settings()
    now = REPLICATED_DEMO_END + after
    with durability.open(replicated_demo) as store:
        plan = plan_sweep(store, settings, now)
        threads = frames.threads(store, now)
    rows = plan.to_frame()
    summary = plan.summary()
    by_replication = rows[(rows.action == "spared") & (rows.owner == "replication")]
    assert len(by_replication), "the demo holds due threads the plane lacks rows of"
    lacking = threads.set_index("thread_id").loc[by_replication.thread_id, "unreplicated"]
    assert (lacking > 0).all()
    days = daily(threads, settings, now, 90)
    first = days.iloc[0]
    assert first["deleted_threads"] == summary["total_delete"]["threads"]
    assert first["deleted_bytes"] == summary["total_delete"]["size_bytes"]
    assert first["deleted_finished_threads"] == summary["delete"]["finished"]["threads"]
    assert first["deleted_waiting_threads"] == summary["delete"]["waiting"]["threads"]
    unreplicated = threads[threads.unreplicated > 0]
    assert days["remaining_threads"].iloc[-1] >= len(unreplicated)
    assert days["remaining_bytes"].iloc[-1] >= unreplicated["size_bytes"].sum()


def test_a_thread_the_plane_lacks_rows_of_is_never_deleted() -> None:
    """Nothing drains in a simulation: `unreplicated > 0` spares a thread for the whole window,
    whatever the policy; the same thread without them goes on its due day."""
    rows = [
        thread("kept", newest_at=T0 - 40 * DAY, unreplicated=2),
        thread("gone", newest_at=T0 - 40 * DAY),
    ]
    frame = daily(threads_frame(rows), [Policy("1d", "1d"), Policy("30d", "7d")], T0, 60)
    assert frame.groupby("policy")["deleted_threads"].sum().tolist() == [1, 1]
    assert (frame.groupby("policy")["remaining_threads"].last() == 1).all()
