"""The checkpoint sweep ("Retention: two horizons", "A thread's own retention", "The
checkpoint sweep"): both horizons, declared values, mark-time due dates, live-thread filters,
racing writers, the round limit, metrics, plan == sweep, the policy diff and the CLI.

Every test runs on a real store of each provider (``target``) with an injected, moving clock;
nothing sleeps. A racing writer is a real second handle writing between delete rounds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from durability import Checkpoint, ThreadRecord
from durability import metrics as sweep_metrics
from durability.cli import cli
from durability.clock import FrozenClock
from durability.errors import CheckpointDeleteError, ConfigError, SweepError
from durability.settings import Settings, declare_retention
from durability.stores import Store
from durability.stores.scans import Scans, SweepColumns
from durability.sweep import (
    ACTIONS,
    HORIZONS,
    LEASE_FILTER,
    MAX_ROUNDS,
    PARK_FILTER,
    PLAN_COLUMNS,
    REPLICATION_FILTER,
    plan_sweep,
    plan_sweeps,
    plans_diff,
    policy_diff,
    register_filter,
    registered_filters,
    sweep,
    unregister_filter,
)
from durability.testing import StoreTarget
from durability.testing.suite import write_for

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
    store.put_writes([write_for(store.history("done")[-1])])
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
        assert set(result.skipped) == {"waiting"}
        assert result.to_dict()["skipped"]["waiting"]["threads"] == 1
        assert store.has_thread("open"), "the sweep leaves it to the key TTL or the process"


def test_a_late_mark_never_extends_the_waiting_horizon_on_sql(
    store: Store, clock: FrozenClock
) -> None:
    """Seed 004 step 2 covers every thread: one marked finished 29 days after its last
    checkpoint still goes 30 days after that checkpoint (on the waiting horizon), not 7 days
    after the mark; redis and memory leave that horizon to the key TTL and the process."""
    started(store, "late")
    clock.advance(29 * DAY)
    store.mark_finished("late")
    clock.advance(DAY)
    plan = plan_sweep(store)
    if sweeps_waiting(store):
        assert actions(plan) == {"late": ("waiting", "delete")}
        assert plan.rows[0].due_at == T0 + 30 * DAY
        assert plan.rows[0].reason.startswith("finished but not due yet; idle past")
        assert sweep(store).deleted_ids("waiting") == ["late"]
        assert not store.has_thread("late")
    else:
        assert actions(plan) == {"late": ("finished", "not_due")}
        assert sweep(store).deleted_ids() == []


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
        skipped = sweep(empty).skipped
    assert skipped["waiting"].threads == 0, (
        "memory reports its waiting horizon skipped, empty or not"
    )
    assert frame.empty
    assert {c: str(t) for c, t in frame.dtypes.items()} == PLAN_COLUMNS


# ---------------------------------------------------------------------------- live-thread filters


def spared_count(horizon: str, owner: str) -> float:
    """The current value of the spared counter for one label pair."""
    value = sweep_metrics.REGISTRY.get_sample_value(
        "durability_checkpoint_sweep_spared_total", {"horizon": horizon, "owner": owner}
    )
    return value or 0.0


def assert_spared(
    store: Store,
    caplog: pytest.LogCaptureFixture,
    thread_id: str,
    owner: str,
    *,
    horizon: str = "finished",
) -> None:
    """A sweep spares ``thread_id`` by ``owner``: WARNING, metric, result, plan, still in the store."""
    plan = {r.thread_id: r for r in plan_sweep(store).rows}
    assert (plan[thread_id].action, plan[thread_id].owner) == ("spared", owner)
    assert f"spared by {owner}" in plan[thread_id].reason
    before = spared_count(horizon, owner)
    with caplog.at_level(logging.WARNING, logger="durability.sweep"):
        result = sweep(store)
    assert [(s.thread_id, s.owner) for s in result.spared[horizon]] == [(thread_id, owner)]
    assert result.to_dict()["spared"][horizon][0]["owner"] == owner
    assert thread_id not in result.deleted_ids()
    assert spared_count(horizon, owner) == before + 1
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and thread_id in r.getMessage()
    ]
    assert warnings, "a spared thread is logged at WARNING"
    record = store.thread(thread_id)
    assert record is not None
    if horizon == "finished":
        assert record.finished, "a spared finished thread stays in the finished set"


def test_the_three_filters_are_registered_by_default() -> None:
    """An unexpired park, a live lease and unreplicated checkpoints, with their metric owners."""
    assert registered_filters()[:3] == [PARK_FILTER, LEASE_FILTER, REPLICATION_FILTER]
    assert [f.owner for f in (PARK_FILTER, LEASE_FILTER, REPLICATION_FILTER)] == [
        "park",
        "lease",
        "replication",
    ]


def test_an_unexpired_park_spares_a_due_thread_until_its_deadline(
    target: StoreTarget, store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A thread parked until T0+10d is spared at T0+8d (due at T0+7d) and deleted once the park expires.

    A plain SQLite handle cannot park, but another handle on the same file opened with
    single_worker=True can: the sweep through the plain handle still sees that park.
    """
    if store.provider == "memory":
        pytest.skip("a memory store never holds a park")
    with (
        target.open(clock=clock, settings=SETTINGS, single_worker=True)
        if (not store.capabilities.can_park)
        else nullcontext(store) as parker
    ):
        started(parker, "parked")
        parker.park(
            Checkpoint(thread_id="parked", node_id="ask"), deadline=T0 + 10 * DAY, reason="approve?"
        )
    store.mark_finished("parked")
    clock.advance(8 * DAY)
    assert_spared(store, caplog, "parked", "park")
    clock.advance(3 * DAY)
    assert sweep(store).deleted_ids() == ["parked"]
    assert store.get_park("parked") is None, "the park goes with its thread"


def test_a_live_lease_spares_a_due_thread_until_it_is_released(
    store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A run in progress holds a lease: its thread is spared on either horizon while the lease lives."""
    finished(store, "running")
    store.acquire_lease("running", "worker-1", timedelta(days=60), run_id="run-running")
    started(store, "idle-but-leased")
    store.acquire_lease("idle-but-leased", "worker-2", timedelta(days=60))
    clock.advance(31 * DAY)
    assert_spared(store, caplog, "running", "lease")
    if sweeps_waiting(store):
        plan = {r.thread_id: r for r in plan_sweep(store).rows}
        assert (plan["idle-but-leased"].action, plan["idle-but-leased"].owner) == (
            "spared",
            "lease",
        )
    store.release_lease("running", "worker-1")
    assert sweep(store).deleted_ids() == ["running"]


def test_an_expired_lease_spares_nothing(store: Store, clock: FrozenClock) -> None:
    """A lease whose run died (not renewed) does not keep a due thread."""
    finished(store, "crashed")
    store.acquire_lease("crashed", "worker-1", timedelta(hours=1))
    clock.advance(8 * DAY)
    assert sweep(store).deleted_ids() == ["crashed"]


def test_checkpoints_the_plane_lacks_spare_a_thread_in_a_store_that_replicates(
    store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Pending or quarantined rows keep the thread while a connection is recorded; synced rows do not."""
    if store.outbox is None:
        pytest.skip(f"the {store.provider} store keeps no outbox")
    store.record_connection("proj", "http://plane.invalid")
    assert store.replicates
    finished(store, "unsent", checkpoints=2)
    finished(store, "sent")
    store.mark_synced((e.thread_id, e.seq) for e in store.outbox(thread_id="sent"))
    clock.advance(8 * DAY)
    plan = {r.thread_id: r for r in plan_sweep(store).rows}
    assert plan["sent"].action == "delete"
    assert "the plane does not have 2 of its checkpoints" in plan["unsent"].reason
    assert_spared(store, caplog, "unsent", "replication")
    assert not store.has_thread("sent")
    entries = store.outbox(thread_id="unsent")
    store.mark_quarantined({(entries[0].thread_id, entries[0].seq): "too big"})
    store.mark_synced([(entries[1].thread_id, entries[1].seq)])
    assert plan_sweep(store).rows[0].owner == "replication", "a quarantined row is not on the plane"
    store.mark_synced([(entries[0].thread_id, entries[0].seq)])
    assert sweep(store).deleted_ids() == ["unsent"]


def test_unreplicated_checkpoints_do_not_spare_a_thread_in_a_store_that_does_not_replicate(
    store: Store, clock: FrozenClock
) -> None:
    """With no connection recorded the store does not replicate: its outbox keeps nothing alive."""
    finished(store, "local-only")
    clock.advance(8 * DAY)
    assert not store.replicates
    assert sweep(store).deleted_ids() == ["local-only"]


class Raising:
    """A consumer's filter that fails."""

    owner = "broken"

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        raise RuntimeError("the flows database is down")


class ClaimsAll:
    """A consumer's filter that claims every candidate."""

    owner = "flows"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        self.asked += [c.thread_id for c in candidates]
        return {c.thread_id: "its flow run is still open" for c in candidates} | {
            "not-a-candidate": "x"
        }


def runs(outcome: str) -> float:
    return (
        sweep_metrics.REGISTRY.get_sample_value(
            "durability_checkpoint_sweep_runs_total", {"outcome": outcome}
        )
        or 0.0
    )


def test_a_filter_that_raises_fails_the_sweep_and_nothing_is_deleted(
    store: Store, clock: FrozenClock
) -> None:
    """Registered or passed in, a failing filter raises SweepError naming it; every due thread stays."""
    finished(store, "a")
    finished(store, "b")
    clock.advance(8 * DAY)
    failures = runs("failure")
    broken = Raising()
    register_filter(broken)
    try:
        with pytest.raises(
            SweepError, match=r"before deleting anything.*'broken'.*the flows database is down"
        ):
            sweep(store)
        with pytest.raises(SweepError, match="broken"):
            plan_sweep(store)
    finally:
        unregister_filter(broken)
    assert broken not in registered_filters()
    with pytest.raises(SweepError, match="broken"):
        sweep(store, filters=[broken])
    assert runs("failure") == failures + 2
    assert store.has_thread("a")
    assert store.has_thread("b")
    assert sorted(sweep(store).deleted_ids()) == ["a", "b"]


def test_a_registered_consumer_filter_is_asked_about_every_candidate_and_spares_them(
    store: Store, clock: FrozenClock
) -> None:
    """Every due thread is put to the filter; ids it returns that are not candidates are ignored."""
    finished(store, "due-1")
    finished(store, "due-2")
    clock.advance(8 * DAY)
    finished(store, "not-due")
    flows = ClaimsAll()
    register_filter(flows)
    try:
        result = sweep(store)
    finally:
        unregister_filter(flows)
    assert sorted(flows.asked) == ["due-1", "due-2"]
    assert result.deleted_ids() == []
    assert sorted(s.thread_id for s in result.spared["finished"]) == ["due-1", "due-2"]
    assert {s.owner for s in result.spared["finished"]} == {"flows"}
    with pytest.raises(ConfigError, match="owner"):
        register_filter(object())  # type: ignore[arg-type]


class KeepsRecords:
    """A consumer's filter that keeps what it was handed and claims nothing."""

    owner = "keeper"

    def __init__(self) -> None:
        self.handed: list[Any] = []

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        self.handed = [*candidates, *candidates[:1]]  # iterated, then indexed by a slice
        return {}


def test_a_filter_is_handed_the_due_threads_real_records(store: Store, clock: FrozenClock) -> None:
    """The plan reads columns, but a filter still gets each due thread's ThreadRecord, as sweep_records has it."""
    finished(store, "due-1", checkpoints=2, waiting="20d")
    started(store, "idle")
    store.acquire_lease("idle", "worker", DAY)
    store.put(Checkpoint(thread_id="bare", node_id="n"))  # no ledger record
    clock.advance(35 * DAY)
    finished(store, "not-due")
    keeper = KeepsRecords()
    plan = plan_sweep(store, filters=[keeper])
    records = {r.thread_id: r for r in store.sweep_records()}
    due = [r.thread_id for r in plan.rows if r.action == "delete"]
    assert all(isinstance(r, ThreadRecord) for r in keeper.handed)
    assert keeper.handed == [records[t] for t in [*due, *due[:1]]]
    assert "due-1" in due
    assert "not-due" not in due


def test_sweep_columns_hold_what_sweep_records_hold(store: Store, clock: FrozenClock) -> None:
    """One row per thread, the same record behind each row, on every provider."""
    finished(store, "done", checkpoints=2, waiting="20d", finished="5d")
    started(store, "open", checkpoints=0)
    store.acquire_lease("open", "worker", DAY)
    store.put(Checkpoint(thread_id="bare", node_id="n"))
    table = store.sweep_columns()
    by_id = {r.thread_id: r for r in store.sweep_records()}
    ids = table.columns["thread_id"].tolist()
    assert sorted(ids) == sorted(by_id)
    assert [table.record(i) for i in range(len(table))] == [by_id[t] for t in ids]
    done = ids.index("done")
    assert table.columns["checkpoints"][done] == 2
    assert table.columns["declared_finished"][done].astype(object) == 5 * DAY
    assert str(table.columns["newest_at"][ids.index("open")]) == "NaT"
    expires = table.columns["lease_expires_at"][ids.index("open")].astype(object)
    assert expires == (T0 + DAY).replace(tzinfo=None), "datetime64[us] holds naive UTC"


# ---------------------------------------------------------------------------- racing writers


def race_after_each_delete(
    monkeypatch: pytest.MonkeyPatch, store: Store, writer: Store, thread_id: str, times: int
) -> list[int]:
    """Make a real second handle write a checkpoint into ``thread_id`` after ``times`` delete rounds."""
    calls: list[int] = []
    delete = store.delete_threads

    def racing(thread_ids: Sequence[str]) -> dict[str, Any]:
        removed = delete(thread_ids)
        calls.append(len(thread_ids))
        if len(calls) <= times:
            writer.put(Checkpoint(thread_id=thread_id, node_id=f"late-{len(calls)}"))
        return removed

    monkeypatch.setattr(store, "delete_threads", racing)
    return calls


def test_a_checkpoint_written_while_the_thread_is_deleted_is_deleted_again(
    target: StoreTarget, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer racing the delete twice: four rounds, its rows counted, the thread gone."""
    finished(store, "busy", checkpoints=2)
    finished(store, "quiet")
    clock.advance(8 * DAY)
    with target.open(clock=clock, settings=SETTINGS) as writer:
        calls = race_after_each_delete(monkeypatch, store, writer, "busy", times=2)
        result = sweep(store)
    assert sorted(result.deleted_ids()) == ["busy", "quiet"]
    busy = next(d for d in result.deleted["finished"] if d.thread_id == "busy")
    assert busy.checkpoints == 4
    assert not store.has_thread("busy")
    if store.provider in ("sqlite", "postgres"):
        # One read after each round finds what the writer added; only that thread goes again.
        assert (result.rounds, calls) == (3, [2, 1, 1])
    else:
        # No cheap emptiness check: a round that removes nothing is what proves a thread empty.
        assert (result.rounds, calls) == (4, [2, 2, 1, 1])


def test_a_thread_still_written_after_100_rounds_fails_the_sweep_naming_it(
    target: StoreTarget, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that never stops writing: the sweep gives up after MAX_ROUNDS, loudly; the batch
    deleted before it stays deleted and is counted on the metrics."""
    # "a-calm" goes first in every store's delete order (by id; by thread key on SQL).
    assert store.delete_order(["a-calm", "runaway"]) == ["a-calm", "runaway"]
    finished(store, "a-calm")
    finished(store, "runaway")
    clock.advance(8 * DAY)
    failures = runs("failure")
    deleted_before = deleted_count("finished")
    with target.open(clock=clock, settings=SETTINGS) as writer:
        calls = race_after_each_delete(monkeypatch, store, writer, "runaway", times=10_000)
        with pytest.raises(
            SweepError, match=f"'runaway' still received checkpoints after {MAX_ROUNDS}"
        ):
            sweep(store, batch_size=1)
    quiet_rounds = 1 if store.provider in ("sqlite", "postgres") else 2  # as in the test above
    assert len(calls) == quiet_rounds + MAX_ROUNDS
    assert MAX_ROUNDS == 100
    assert runs("failure") == failures + 1
    assert not store.has_thread("a-calm")
    assert deleted_count("finished") == deleted_before + 1


def deleted_count(horizon: str) -> float:
    return (
        sweep_metrics.REGISTRY.get_sample_value(
            "durability_checkpoint_sweep_deleted_threads_total", {"horizon": horizon}
        )
        or 0.0
    )


def test_on_redis_a_delete_that_stops_making_progress_raises_checkpoint_delete_error(
    tmp_path: Any, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 004: the Redis store's delete fails at the first round (from the second) that leaves no fewer rows."""
    from conftest import make_target

    for target in make_target("redis", tmp_path):
        with (
            target.open(clock=clock, settings=SETTINGS, delete_batch=1) as store,
            target.open(clock=clock, settings=SETTINGS) as writer,
        ):
            finished(store, "flooded", checkpoints=3)
            clock.advance(8 * DAY)
            rounds = flood_each_delete_round(monkeypatch, store, writer, "flooded")
            with pytest.raises(CheckpointDeleteError, match=r"'flooded'.*still writing"):
                sweep(store)
            assert len(rounds) == 2


def flood_each_delete_round(
    monkeypatch: pytest.MonkeyPatch, store: Store, writer: Store, thread_id: str
) -> list[str]:
    """After each of the Redis store's delete rounds, a second handle writes two rows into the thread."""
    evaluate = store.eval  # type: ignore[attr-defined]
    rounds: list[str] = []

    def flooding(action: str, name: str, *args: Any, **kwargs: Any) -> Any:
        out = evaluate(action, name, *args, **kwargs)
        if name == "delete_round":
            rounds.append(name)
            for n in range(2):  # two rows in for every one a round removes
                writer.put(Checkpoint(thread_id=thread_id, node_id=f"late-{len(rounds)}-{n}"))
        return out

    monkeypatch.setattr(store, "eval", flooding)
    return rounds


# ---------------------------------------------------------------------------- metrics and result


def test_the_sweep_metrics_count_what_was_deleted_and_render_as_prometheus_text(
    store: Store, clock: FrozenClock
) -> None:
    """Deleted threads and checkpoints per horizon, runs by outcome and the last success time."""

    def value(name: str, **labels: str) -> float:
        return sweep_metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    finished(store, "f", checkpoints=3)
    started(store, "w", checkpoints=2)
    clock.advance(31 * DAY)
    before = {
        h: (
            value("durability_checkpoint_sweep_deleted_threads_total", horizon=h),
            value("durability_checkpoint_sweep_deleted_checkpoints_total", horizon=h),
        )
        for h in HORIZONS
    }
    successes = runs("success")
    sweep(store)
    waiting = 1 if sweeps_waiting(store) else 0
    assert (
        value("durability_checkpoint_sweep_deleted_threads_total", horizon="finished")
        == before["finished"][0] + 1
    )
    assert (
        value("durability_checkpoint_sweep_deleted_checkpoints_total", horizon="finished")
        == before["finished"][1] + 3
    )
    assert (
        value("durability_checkpoint_sweep_deleted_threads_total", horizon="waiting")
        == before["waiting"][0] + waiting
    )
    assert (
        value("durability_checkpoint_sweep_deleted_checkpoints_total", horizon="waiting")
        == before["waiting"][1] + 2 * waiting
    )
    assert runs("success") == successes + 1
    assert value("durability_checkpoint_sweep_last_success_timestamp_seconds") > 0
    text = sweep_metrics.render().decode()
    for name in (
        "durability_checkpoint_sweep_spared_total",
        "durability_checkpoint_sweep_deleted_threads_total",
        "durability_checkpoint_sweep_deleted_checkpoints_total",
        "durability_checkpoint_sweep_runs_total",
        "durability_checkpoint_sweep_last_success_timestamp_seconds",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text
    assert 'durability_checkpoint_sweep_runs_total{outcome="success"}' in text


def test_the_result_is_json_ready(store: Store, clock: FrozenClock) -> None:
    """to_dict round-trips through json with per-horizon deleted, spared and skipped."""
    finished(store, "f", checkpoints=2)
    clock.advance(8 * DAY)
    data = json.loads(json.dumps(sweep(store).to_dict()))
    assert data["deleted"]["finished"] == {
        "threads": 1,
        "checkpoints": 2,
        "writes": 0,
        "thread_ids": ["f"],
    }
    assert data["totals"] == {"threads": 1, "checkpoints": 2, "writes": 0, "spared": 0}
    assert set(data["spared"]) == set(data["skipped"]) == set(HORIZONS)
    assert data["provider"] == store.provider
    assert data["now"] == (T0 + 8 * DAY).isoformat()


def test_a_long_sweep_deletes_in_batches_behind_a_progress_bar(
    store: Store, clock: FrozenClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch_size threads per store call; the tqdm bar shows once there is more than one batch."""
    for n in range(5):
        finished(store, f"t{n}")
    clock.advance(8 * DAY)
    result = sweep(store, progress=True, batch_size=2)
    assert len(result.deleted_ids()) == 5
    assert "5/5" in capsys.readouterr().err


# ---------------------------------------------------------------------------- plan == sweep


THREAD = st.fixed_dictionaries(
    {
        "checkpoints": st.integers(0, 3),
        "age_days": st.integers(0, 40),
        "declared_waiting": st.none() | st.integers(1, 30),
        "declared_finished": st.none() | st.integers(1, 7),
        "finished": st.booleans(),
        "lease_days": st.none() | st.integers(-2, 5),
        "unsynced": st.booleans(),
        "park_days": st.none() | st.integers(1, 40),
    }
)


def build(store: Store, clock: FrozenClock, threads: list[dict[str, Any]]) -> None:
    """A store holding ``threads``: each started ``age_days`` before T0+40d, some marked, leased,
    unsynced, parked (where the store can park)."""
    for n, spec in enumerate(threads):
        thread_id = f"t{n}"
        clock.set(T0 + timedelta(days=40 - spec["age_days"]))
        waiting, finished_value = spec["declared_waiting"], spec["declared_finished"]
        if waiting is not None and finished_value is not None and finished_value > waiting:
            finished_value = waiting
        retention = declare_retention(
            store.settings,
            waiting=None if waiting is None else timedelta(days=waiting),
            finished=None if finished_value is None else timedelta(days=finished_value),
        )
        store.record_run_start(thread_id, run_id=f"r{n}", owner="h", retention=retention)
        for i in range(spec["checkpoints"]):
            store.put(Checkpoint(thread_id=thread_id, node_id=f"s{i}"), synced=not spec["unsynced"])
        if spec["park_days"] is not None and store.capabilities.can_park:
            # A deadline within the thread's waiting horizon: expired or not by T0+40d.
            days = min(spec["park_days"], waiting or SETTINGS.waiting_retention.days)
            store.park(
                Checkpoint(thread_id=thread_id, node_id="ask", status="interrupted"),
                deadline=clock() + timedelta(days=days),
                reason="approval",
            )
        if spec["finished"]:
            store.mark_finished(thread_id)
        if spec["lease_days"] is not None:
            clock.set(T0 + timedelta(days=40 + spec["lease_days"]) - DAY)
            store.acquire_lease(thread_id, "w", DAY)
    clock.set(T0 + timedelta(days=40))


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def small_target(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[StoreTarget]:
    """Every provider (SQLite may park), one store reset for each example."""
    from conftest import make_target

    yield from make_target(request.param, tmp_path)


@hypothesis_settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(threads=st.lists(THREAD, max_size=8), connected=st.booleans())
def test_the_plan_says_exactly_what_the_sweep_deletes(
    small_target: StoreTarget, threads: list[dict[str, Any]], connected: bool
) -> None:
    """On random small stores, the plan's delete rows are the threads the sweep deletes; every other thread stays."""
    clock = FrozenClock(T0)
    with small_target.open(clock=clock, settings=SETTINGS) as store:
        store.reset()
        if connected and (store.outbox is not None):
            store.record_connection("p", "http://plane.invalid")
        build(store, clock, threads)
        plan = plan_sweep(store)
        before = {r.thread_id for r in store.sweep_records()}
        assert {r.thread_id for r in plan.rows} == before
        result = sweep(store)
        planned = {r.thread_id for r in plan.deletes()}
        assert set(result.deleted_ids()) == planned
        assert {r.thread_id for r in store.sweep_records()} == before - planned
        for horizon in HORIZONS:
            assert {s.thread_id for s in result.spared[horizon]} == {
                r.thread_id for r in plan.rows if r.horizon == horizon and r.action == "spared"
            }
        assert result.checkpoints() == sum(r.checkpoints for r in plan.deletes())


# ---------------------------------------------------------------------------- policy diff


def test_policy_diff_lists_the_threads_whose_action_changes(
    store: Store, clock: FrozenClock
) -> None:
    """A shorter waiting value would delete idle threads; a shorter finished value moves no existing mark."""
    started(store, "idle", checkpoints=2)
    finished(store, "marked")
    clock.advance(10 * DAY)
    proposed = SETTINGS.update(waiting_retention="7d", finished_retention="1d")
    diff = policy_diff(store, SETTINGS, proposed)
    assert list(diff.columns) == [
        "thread_id",
        "horizon",
        "current_action",
        "proposed_action",
        "checkpoints",
        "size_bytes",
    ]
    if sweeps_waiting(store):
        assert diff.to_dict("records") == [
            {
                "thread_id": "idle",
                "horizon": "waiting",
                "current_action": "not_due",
                "proposed_action": "delete",
                "checkpoints": 2,
                "size_bytes": store.thread("idle").size_bytes,  # type: ignore[union-attr]
            }
        ]
    else:
        assert diff.empty, "the waiting horizon is skipped either way; the mark keeps its due time"
    assert policy_diff(store, SETTINGS, SETTINGS).empty
    assert (store.provider in ("memory", "redis")) == ("waiting" in sweep(store).skipped), (
        "the skipped horizon is reported even when it holds nothing due"
    )
    assert store.has_thread("idle"), "a diff deletes nothing"


def test_plans_made_together_read_the_store_once_and_diff_as_policy_diff(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plan_sweeps`` is ``plan_sweep`` per settings from one read; ``plans_diff`` of its plans
    is ``policy_diff``; plans not made together are refused."""
    started(store, "idle", checkpoints=2)
    finished(store, "marked")
    clock.advance(10 * DAY)
    proposed = SETTINGS.update(waiting_retention="7d", finished_retention="1d")
    expected = [plan_sweep(store, s) for s in (SETTINGS, proposed)]
    diff = policy_diff(store, SETTINGS, proposed)
    reads: list[object] = []
    read = Scans.sweep_columns

    def counted(self: Scans) -> SweepColumns:
        reads.append(self)
        return read(self)

    monkeypatch.setattr(Scans, "sweep_columns", counted)
    plans = plan_sweeps(store, [SETTINGS, proposed])
    assert len(reads) == 1
    assert list(plans) == expected
    pd.testing.assert_frame_equal(plans_diff(*plans), diff)
    clock.advance(DAY)
    with pytest.raises(ConfigError, match="plan_sweeps"):
        plans_diff(plans[0], plan_sweep(store, proposed))


# ---------------------------------------------------------------------------- the CLI


def test_the_cli_previews_with_dry_run_and_sweeps_with_json(tmp_path: Any) -> None:
    """--dry-run --json parses and changes nothing; the real sweep's --json is the result; --now is ISO."""
    from durability.stores import open_store

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    clock = FrozenClock(T0)
    with open_store(url, clock=clock, settings=Settings()) as store:
        finished(store, "old", checkpoints=2)
        started(store, "fresh")
    later = (T0 + 8 * DAY).isoformat()
    runner = CliRunner()
    preview = runner.invoke(cli, ["sweep", url, "--dry-run", "--json", "--now", later])
    assert preview.exit_code == 0, preview.output
    data = json.loads(preview.output)
    assert data["dry_run"] is True
    assert data["summary"]["total_delete"] == {
        "threads": 1,
        "checkpoints": 2,
        "size_bytes": data["rows"][0]["size_bytes"],
    }
    assert {r["thread_id"]: r["action"] for r in data["rows"]} == {
        "old": "delete",
        "fresh": "not_due",
    }
    table = runner.invoke(cli, ["sweep", url, "--dry-run", "--now", later])
    assert table.exit_code == 0
    assert "nothing was deleted" in table.output
    with open_store(url, settings=Settings()) as store:
        assert store.has_thread("old"), "a dry run deletes nothing"

    swept = runner.invoke(cli, ["sweep", url, "--json", "--now", later])
    assert swept.exit_code == 0, swept.output
    result = json.loads(swept.output)
    assert result["dry_run"] is False
    assert result["deleted"]["finished"]["thread_ids"] == ["old"]
    assert result["totals"]["checkpoints"] == 2
    again = runner.invoke(cli, ["sweep", url, "--now", later])
    assert again.exit_code == 0
    assert "deleted 0 threads" in again.output

    bad = runner.invoke(cli, ["sweep", url, "--now", "yesterday"])
    assert bad.exit_code == 2
    assert "ISO 8601" in bad.output
    assert "Admin only" in runner.invoke(cli, ["sweep", "--help"]).output


def test_a_mark_in_the_deployment_ledger_for_a_thread_on_a_per_run_store_deletes_only_the_mark(
    target: StoreTarget, clock: FrozenClock, tmp_path: Any
) -> None:
    """Seed 004 "What a per-run provider means": the sweep's delete finds nothing there; the run's store keeps its rows."""
    from durability.stores import open_store

    with (
        open_store(
            f"sqlite:///{tmp_path / 'deployment.db'}", clock=clock, settings=SETTINGS
        ) as deployment,
        target.open(clock=clock, settings=SETTINGS) as per_run,
    ):
        per_run.put(Checkpoint(thread_id="flow-9/agent", state={"n": 1}))
        deployment.record_run_start("flow-9/agent", run_id="flow-9", owner="flow:f")
        deployment.mark_finished("flow-9/agent")
        clock.advance(8 * DAY)
        plan = plan_sweep(deployment)
        assert [(r.thread_id, r.action, r.checkpoints) for r in plan.rows] == [
            ("flow-9/agent", "delete", 0)
        ]
        result = sweep(deployment)
        assert result.deleted["finished"][0].checkpoints == 0
        assert deployment.thread("flow-9/agent") is None
        assert per_run.has_thread("flow-9/agent"), "it leaves on its own store's waiting horizon"


def test_a_declared_waiting_value_above_a_since_lowered_platform_value_is_capped(
    target: StoreTarget, clock: FrozenClock
) -> None:
    """The platform's value is every thread's ceiling: a 20d declaration under a lowered 10d platform goes at 10d."""
    with target.open(clock=clock, settings=SETTINGS) as store:
        started(store, "declared-long", waiting="20d")
        lowered = SETTINGS.update(waiting_retention="10d", finished_retention="7d")
        clock.advance(10 * DAY)
        row = plan_sweep(store, lowered).rows[0]
        if not sweeps_waiting(store):
            assert row.action == "skipped"
            return
        assert (row.action, row.due_at) == ("delete", T0 + 10 * DAY)
        assert "platform waiting retention of 10d" in row.reason
        assert row.declared_waiting == 20 * DAY


def test_a_sweep_survives_the_server_dropping_its_connections(
    target: StoreTarget, store: Store, clock: FrozenClock
) -> None:
    """Postgres and Redis: connections killed between sweeps are replaced; the read and the delete run again."""
    if target.kill_connections is None:
        pytest.skip(f"the {store.provider} store has no server connection to lose")
    finished(store, "due", checkpoints=2)
    clock.advance(8 * DAY)
    assert plan_sweep(store).deletes()[0].thread_id == "due"
    assert target.kill_connections() > 0
    assert plan_sweep(store).deletes()[0].thread_id == "due"
    target.kill_connections()
    result = sweep(store)
    assert result.deleted_ids() == ["due"]
    assert result.checkpoints() == 2
