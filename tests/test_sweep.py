"""The checkpoint sweep (seed 004 "Retention: two horizons", "A thread's own retention", "The
checkpoint sweep"): both horizons, declared values, mark-time due dates, live-thread filters,
racing writers, the round limit, metrics, plan == sweep, the policy diff and the CLI.

Every test runs on a real store of each provider (``target``) with an injected, moving clock;
nothing sleeps. A racing writer is a real second handle writing between delete rounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durability import Checkpoint, PendingWrite
from durability.clock import FrozenClock
from durability.errors import ConfigError
from durability.settings import Settings, declare_retention
from durability.stores import Store
from durability.sweep import (
    ACTIONS,
    HORIZONS,
    PLAN_COLUMNS,
    plan_sweep,
    sweep,
)
from durability.testing import StoreTarget

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = Settings(waiting_retention="30d", finished_retention="7d")


@pytest.fixture
def clock() -> FrozenClock:
    """The injected clock every store handle of a test shares."""
    return FrozenClock(T0)


@pytest.fixture
def store(target: StoreTarget, clock: FrozenClock) -> Iterator[Store]:
    """A handle on a fresh store of each provider, on the test's clock."""
    with target.open(clock=clock, settings=SETTINGS) as opened:
        yield opened


def started(store: Store, thread_id: str, *, checkpoints: int = 1, **declared: Any) -> None:
    """A run starts on ``thread_id`` (declaring ``declared``) and writes ``checkpoints`` rows."""
    retention = declare_retention(store.settings, **declared) if declared else None
    store.record_run_start(thread_id, run_id=f"run-{thread_id}", owner="test", retention=retention)
    for n in range(checkpoints):
        store.put(Checkpoint(thread_id=thread_id, node_id=f"step-{n}", state={"n": n}))


def finished(store: Store, thread_id: str, **kwargs: Any) -> None:
    """A run that minted ``thread_id`` writes and marks it finished."""
    started(store, thread_id, **kwargs)
    store.mark_finished(thread_id)


def actions(plan: Any) -> dict[str, tuple[str, str]]:
    """``{thread_id: (horizon, action)}`` of a plan."""
    return {r.thread_id: (r.horizon, r.action) for r in plan.rows}


def sweeps_waiting(store: Store) -> bool:
    return store.capabilities.sweeps_waiting


# ---------------------------------------------------------------------------- horizons


def test_a_finished_thread_goes_its_finished_retention_after_its_mark_on_every_provider(
    store: Store, clock: FrozenClock
) -> None:
    """Marked at T0 with 7 days: kept until T0+7d, deleted whole from then on (memory and redis included)."""
    finished(store, "done", checkpoints=3)
    store.put_writes(
        [
            PendingWrite(
                thread_id="done",
                checkpoint_id=store.history("done")[-1].checkpoint_id,
                task_id="t",
                idx=0,
                channel="c",
                value=1,
            )
        ]
    )
    clock.advance(7 * DAY - timedelta(seconds=1))
    assert actions(plan_sweep(store)) == {"done": ("finished", "not_due")}
    assert sweep(store).deleted_ids() == []
    assert store.has_thread("done")

    clock.advance(timedelta(seconds=1))
    plan = plan_sweep(store)
    assert actions(plan) == {"done": ("finished", "delete")}
    assert plan.rows[0].due_at == T0 + 7 * DAY
    result = sweep(store)
    assert result.deleted_ids("finished") == ["done"]
    assert (result.checkpoints("finished"), result.writes("finished")) == (3, 1)
    assert not store.has_thread("done")
    assert store.thread("done") is None, "the ledger record goes too"
    assert store.finished_due(clock() + 400 * DAY) == []


def test_a_waiting_thread_goes_its_waiting_retention_after_its_newest_checkpoint_on_sql_only(
    store: Store, clock: FrozenClock
) -> None:
    """On postgres and sqlite an idle unmarked thread is deleted; redis and memory report the horizon skipped."""
    started(store, "open")
    clock.advance(20 * DAY)
    store.put(Checkpoint(thread_id="open", node_id="later"))  # a later write moves the horizon
    clock.advance(30 * DAY - timedelta(seconds=1))
    assert actions(plan_sweep(store))["open"] == (
        ("waiting", "not_due") if sweeps_waiting(store) else ("waiting", "skipped")
    )
    clock.advance(timedelta(seconds=1))
    plan = plan_sweep(store)
    result = sweep(store)
    if sweeps_waiting(store):
        assert actions(plan)["open"] == ("waiting", "delete")
        assert plan.rows[0].due_at == T0 + 50 * DAY
        assert result.deleted_ids("waiting") == ["open"]
        assert result.checkpoints("waiting") == 2
        assert not store.has_thread("open")
        assert "waiting" not in result.skipped
    else:
        assert actions(plan)["open"] == ("waiting", "skipped")
        assert result.deleted_ids() == []
        assert result.skipped["waiting"].threads == 1
        assert store.provider in result.skipped["waiting"].reason
        assert result.to_dict()["skipped"]["waiting"]["threads"] == 1
        assert store.has_thread("open"), "the sweep leaves it to the key TTL or the process"


def test_the_declared_waiting_retention_recorded_at_run_start_is_the_threads_horizon(
    store: Store, clock: FrozenClock
) -> None:
    """A thread declaring 2 days goes after 2 days; a later run on it replaces the declaration."""
    started(store, "short", waiting="2d")
    started(store, "replaced", waiting="2d")
    started(store, "platform")
    clock.advance(DAY)
    store.record_run_start(
        "replaced",
        run_id="run-2",
        owner="test",
        retention=declare_retention(store.settings, waiting="10d"),
    )
    clock.advance(DAY)
    plan = {r.thread_id: r for r in plan_sweep(store).rows}
    assert plan["short"].declared_waiting == 2 * DAY
    assert plan["replaced"].declared_waiting == 10 * DAY
    assert plan["platform"].declared_waiting is None
    if not sweeps_waiting(store):
        assert {r.action for r in plan.values()} == {"skipped"}
        return
    assert plan["short"].action == "delete"
    assert "declared waiting retention of 2d" in plan["short"].reason
    assert plan["replaced"].action == "not_due"
    assert plan["replaced"].due_at == T0 + 10 * DAY
    assert plan["platform"].due_at == T0 + 30 * DAY
    assert sweep(store).deleted_ids() == ["short"]
    clock.set(T0 + 10 * DAY)
    assert sweep(store).deleted_ids() == ["replaced"]


def test_a_declared_finished_retention_and_the_cap_at_the_declared_waiting_one(
    store: Store, clock: FrozenClock
) -> None:
    """Declared finished 1d is due a day after the mark; declared waiting 3d caps the platform's 7d finished."""
    finished(store, "declared", finished="1d")
    finished(store, "capped", waiting="3d")
    finished(store, "platform")
    due = {r.thread_id: r.due_at for r in plan_sweep(store).rows}
    assert due == {"declared": T0 + DAY, "capped": T0 + 3 * DAY, "platform": T0 + 7 * DAY}
    clock.advance(3 * DAY)
    assert sorted(sweep(store).deleted_ids("finished")) == ["capped", "declared"]


def test_changing_the_finished_value_later_moves_only_new_marks(
    target: StoreTarget, clock: FrozenClock
) -> None:
    """A mark keeps the due time of the retention in force at the mark; a new mark takes the new value."""
    with target.open(clock=clock, settings=SETTINGS) as before:
        finished(before, "old-mark")
    shorter = SETTINGS.update(finished_retention="1d")
    with target.open(clock=clock, settings=shorter) as after:
        finished(after, "new-mark")
        clock.advance(DAY)
        plan = plan_sweep(after)
        assert actions(plan) == {
            "old-mark": ("finished", "not_due"),
            "new-mark": ("finished", "delete"),
        }
        assert sweep(after, shorter).deleted_ids() == ["new-mark"]
        clock.set(T0 + 7 * DAY)
        assert sweep(after, shorter).deleted_ids() == ["old-mark"]


def test_a_thread_taken_out_of_the_finished_set_falls_back_to_the_waiting_horizon(
    store: Store, clock: FrozenClock
) -> None:
    """A consumer that starts a run on a finished thread unmarks it: the finished due time no longer applies."""
    finished(store, "reused")
    store.unmark_finished("reused")
    clock.advance(8 * DAY)
    expected = "not_due" if sweeps_waiting(store) else "skipped"
    assert actions(plan_sweep(store)) == {"reused": ("waiting", expected)}
    assert sweep(store).deleted_ids() == []


def test_the_sweep_covers_only_the_store_it_is_given(
    target: StoreTarget, clock: FrozenClock, tmp_path: Any
) -> None:
    """Seed 004 "Scope": a due thread in another store is not touched."""
    from durability.stores import open_store

    with (
        target.open(clock=clock, settings=SETTINGS) as deployment,
        open_store(f"sqlite:///{tmp_path / 'other.db'}", clock=clock, settings=SETTINGS) as other,
    ):
        finished(deployment, "here")
        finished(other, "elsewhere")
        clock.advance(8 * DAY)
        assert sweep(deployment).deleted_ids() == ["here"]
        assert other.has_thread("elsewhere")


# ---------------------------------------------------------------------------- the plan


def test_the_plan_has_one_row_per_thread_with_documented_columns(
    store: Store, clock: FrozenClock
) -> None:
    """Every thread appears once; the frame has PLAN_COLUMNS with aware UTC times; summary counts add up."""
    finished(store, "f-due", checkpoints=2)
    started(store, "w-old", checkpoints=3)
    clock.advance(31 * DAY)
    finished(store, "f-new")
    started(store, "w-new")
    plan = plan_sweep(store)
    assert sorted(r.thread_id for r in plan.rows) == ["f-due", "f-new", "w-new", "w-old"]
    assert {r.horizon for r in plan.rows} <= set(HORIZONS)
    assert {r.action for r in plan.rows} <= set(ACTIONS)
    frame = plan.to_frame()
    assert list(frame.columns) == list(PLAN_COLUMNS)
    assert {c: str(t) for c, t in frame.dtypes.items()} == PLAN_COLUMNS
    assert len(frame) == 4
    summary = plan.summary()
    assert summary["counts"]["finished"] == {"delete": 1, "spared": 0, "not_due": 1, "skipped": 0}
    waiting_delete = 1 if sweeps_waiting(store) else 0
    assert summary["delete"]["finished"]["checkpoints"] == 2
    assert summary["total_delete"]["threads"] == 1 + waiting_delete
    assert summary["total_delete"]["checkpoints"] == 2 + 3 * waiting_delete
    assert plan.to_frame().empty is False
    empty = plan_sweep(store, now=T0 - DAY)
    assert {r.action for r in empty.rows} <= {"not_due", "skipped"}


def test_plan_and_sweep_refuse_a_naive_time_and_a_bad_batch(store: Store) -> None:
    """Bad input is refused naming the value, before anything is read or deleted."""
    with pytest.raises(ConfigError, match="naive"):
        plan_sweep(store, now=datetime(2026, 1, 1))
    with pytest.raises(ConfigError, match="batch_size=0"):
        sweep(store, batch_size=0)
    with pytest.raises(ConfigError, match="Settings"):
        plan_sweep(store, settings={"waiting": "1d"})  # type: ignore[arg-type]


def test_an_empty_plan_still_has_the_columns(tmp_path: Any) -> None:
    """A store with no threads plans no rows and a frame with every column."""
    from durability.stores import open_store

    with open_store("memory://", settings=SETTINGS) as empty:
        frame = plan_sweep(empty).to_frame()
    assert frame.empty
    assert {c: str(t) for c, t in frame.dtypes.items()} == PLAN_COLUMNS
