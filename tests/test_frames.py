"""The frames (durability.frames) on every provider, over stores written by the real runner.

Each store holds a completed run whose steps come hours apart, a failed run, a parked run
(where the provider can hold parks), a run caught while it holds its lease, and (where the
store keeps an outbox) rows the plane took, refused and has not seen yet. The frames'
columns and dtypes must equal ``frames.COLUMNS`` and their values what was written, read
back through the store's own row-by-row API or known from the injected clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
import runner_defs

from durability import codec, frames
from durability.clock import FrozenClock
from durability.errors import ConfigError
from durability.model import Checkpoint
from durability.runs import RunContext, RunControl, Runner, list_runs, read_thread
from durability.stores.aggregates import Aggregates
from durability.stores.base import Store
from durability.testing import StoreTarget
from durability.vocabulary import status_word

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def wait(name: str, clock: FrozenClock, hours: float) -> Any:
    """A step that takes ``hours`` on the injected clock."""

    def step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        clock.advance(timedelta(hours=hours))
        return {**state, name: True}

    step.__name__ = name
    return step


def explode(state: Any, ctx: RunContext) -> Any:
    raise ValueError("the review service said no")


class Fleet:
    """What the runs wrote, as the test knows it (ids, times, snapshots taken mid-run)."""

    def __init__(self, store: Store, clock: FrozenClock) -> None:
        self.store, self.clock = store, clock
        self.snapshots: dict[str, pd.DataFrame] = {}
        steps = Runner("steps", [wait("a", clock, 1), wait("b", clock, 3), wait("c", clock, 2)])
        self.completed = steps.start(store, {"topic": "gaps"})
        clock.advance(timedelta(days=1))
        self.failed = Runner("fails", [wait("a", clock, 0.5), explode]).start(store, {})
        clock.advance(timedelta(hours=2))
        self.parked = None
        if store.capabilities.can_park:
            self.parked = runner_defs.approval.start(store, {"topic": "retention"})
        clock.advance(timedelta(hours=1))
        self.running = Runner("watch", [("look", self.look)]).start(store, {})
        self.replicates = store.outbox is not None
        if self.replicates:
            self.replicate()
        self.end = clock()

    def look(self, state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        """Snapshot the frames while this run holds its thread's lease."""
        self.snapshots["threads"] = frames.threads(self.store)
        self.snapshots["runs"] = frames.runs(self.store)
        self.snapshots["thread_id"] = ctx.thread_id  # type: ignore[assignment]
        return state

    def replicate(self) -> None:
        """The plane takes the completed run's rows, refuses the failed run's end, sees no others."""
        self.clock.advance(timedelta(hours=1))
        self.synced_at = self.clock()
        done = read_thread(self.store, self.completed.thread_id)
        self.store.mark_synced([(c.thread_id, c.seq or 0) for c in done])
        self.clock.advance(timedelta(hours=1))
        self.quarantined_at = self.clock()
        end = read_thread(self.store, self.failed.thread_id)[-1]
        self.quarantined = (end.thread_id, end.seq or 0)
        self.store.mark_quarantined({self.quarantined: "payload over the 1048576-byte cap"})
        first = read_thread(self.store, self.failed.thread_id)[0]
        self.attempted = (first.thread_id, first.seq or 0)
        self.store.record_attempt([self.attempted], "HTTP 503 from the plane")

    def threads(self) -> list[str]:
        ids = [self.completed.thread_id, self.failed.thread_id, self.running.thread_id]
        return sorted([*ids, self.parked.thread_id] if self.parked else ids)

    def rows(self) -> list[Checkpoint]:
        """Every checkpoint, as the store's row API reads it (threads in id order, write order)."""
        return [cp for t in self.threads() for cp in read_thread(self.store, t)]

    def left_outbox(self, cp: Checkpoint) -> datetime | None:
        """When the row stopped being pending (``None``: still pending)."""
        if cp.thread_id == self.completed.thread_id:
            return self.synced_at
        if (cp.thread_id, cp.seq) == self.quarantined:
            return self.quarantined_at
        return None


@pytest.fixture
def fleet(target: StoreTarget) -> Iterator[Fleet]:
    clock = FrozenClock(T0)
    with target.open(clock=clock) as store:
        yield Fleet(store, clock)


def assert_columns(frame: pd.DataFrame, name: str) -> None:
    assert frame.dtypes.astype(str).to_dict() == frames.COLUMNS[name]
    assert list(frame.columns) == list(frames.COLUMNS[name])


def ts(value: datetime | None) -> Any:
    return pd.NaT if value is None else pd.Timestamp(value)


# ---------------------------------------------------------------------------- checkpoints


def test_checkpoints_frame_is_every_checkpoint_as_written(fleet: Fleet) -> None:
    """One row per checkpoint with the stored ids, steps, statuses, times, sizes and outbox state."""
    frame = frames.checkpoints(fleet.store)
    assert_columns(frame, "checkpoints")
    rows = fleet.rows()
    assert len(frame) == len(rows)
    expected = pd.DataFrame(
        {
            "thread_id": [c.thread_id for c in rows],
            "namespace": [c.namespace for c in rows],
            "run_id": [c.run_id for c in rows],
            "checkpoint_id": [c.checkpoint_id for c in rows],
            "seq": [c.seq for c in rows],
            "node_id": [c.node_id for c in rows],
            "step": [c.step for c in rows],
            "step_type": [c.step_type for c in rows],
            "status": [status_word(c.status) for c in rows],
            "created_at": [ts(c.created_at) for c in rows],
            "size_bytes": [c.size_bytes for c in rows],
        }
    )
    key = ["thread_id", "seq"]
    got = frame[list(expected.columns)].sort_values(key, ignore_index=True).astype(object)
    assert got.to_dict("records") == expected.astype(object).to_dict("records")
    assert frame["seq"].is_monotonic_increasing, "write order"
    synced = frame.set_index(["thread_id", "seq"])
    for cp in rows:
        row = synced.loc[(cp.thread_id, cp.seq)]
        if not fleet.replicates:
            assert row["synced"] is pd.NA
        elif (cp.thread_id, cp.seq) == fleet.quarantined:
            assert (row["synced"], row["sync_error"]) == (True, "payload over the 1048576-byte cap")
        else:
            assert bool(row["synced"]) == (cp.thread_id == fleet.completed.thread_id)
            assert row["sync_error"] is pd.NA
    one = frames.checkpoints(fleet.store, thread_id=fleet.failed.thread_id)
    assert one["checkpoint_id"].tolist() == [
        c.checkpoint_id for c in read_thread(fleet.store, fleet.failed.thread_id)
    ]


def test_state_is_decoded_only_when_asked(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """No frame decodes a state unless decode_state=True (a state decode here fails loudly)."""
    expected = {(c.thread_id, c.seq): c.state for c in fleet.rows()}
    loads = codec.loads

    def refuse_state(text: str, *args: Any, path: str = "", **kwargs: Any) -> Any:
        if path.startswith("state"):
            raise AssertionError(f"a frame decoded {path}")
        return loads(text, *args, path=path, **kwargs)

    monkeypatch.setattr(codec, "loads", refuse_state)
    assert "state" not in frames.checkpoints(fleet.store).columns
    for build in (frames.threads, frames.outbox, frames.parks, frames.runs, frames.backlog):
        build(fleet.store)
    with pytest.raises(AssertionError, match="decoded state"):
        frames.checkpoints(fleet.store, decode_state=True)
    monkeypatch.setattr(codec, "loads", loads)
    decoded = frames.checkpoints(fleet.store, decode_state=True)
    assert str(decoded.dtypes["state"]) == frames.STATE_COLUMN["state"]
    assert {
        (t, s): v for t, s, v in zip(decoded.thread_id, decoded.seq, decoded.state, strict=True)
    } == expected


# ---------------------------------------------------------------------------- threads


def test_threads_frame_totals_gaps_ledger_and_parks(fleet: Fleet) -> None:
    """Per thread: count, bytes, first/newest, longest idle gap, newest status, ledger and park."""
    now = fleet.end
    frame = frames.threads(fleet.store, now=now)
    assert_columns(frame, "threads")
    assert frame["thread_id"].tolist() == fleet.threads()
    by_id = frame.set_index("thread_id")
    for thread_id in fleet.threads():
        rows = read_thread(fleet.store, thread_id)
        record = fleet.store.thread(thread_id)
        assert record is not None
        row = by_id.loc[thread_id]
        times = [c.created_at for c in rows]
        gaps = [b - a for a, b in itertools.pairwise(times) if a and b]
        assert (row["checkpoints"], row["size_bytes"]) == (
            len(rows),
            sum(c.size_bytes or 0 for c in rows),
        )
        assert (row["first_at"], row["newest_at"]) == (ts(times[0]), ts(max(t for t in times if t)))
        assert row["max_idle_gap"] == pd.Timedelta(max(gaps))
        assert (row["status"], row["run_id"], row["owner"]) == (
            status_word(rows[-1].status),
            record.run_id,
            record.owner,
        )
        assert (row["started_at"], row["finished_at"], row["due_at"]) == (
            ts(record.started_at),
            ts(record.finished_at),
            ts(record.due_at),
        )
        assert row["declared_waiting"] is pd.NaT
        assert row["lease_holder"] is pd.NA, "every run has ended or parked: no live lease"
    done = by_id.loc[fleet.completed.thread_id]
    assert done["max_idle_gap"] == pd.Timedelta(hours=3), "steps 1h, 3h and 2h apart"
    assert done["finished_at"] == pd.Timestamp(T0 + timedelta(hours=6))
    assert done["due_at"] == done["finished_at"] + fleet.store.settings.finished_retention
    assert by_id.loc[fleet.failed.thread_id, "status"] == "failed"
    if fleet.parked is not None:
        park = by_id.loc[fleet.parked.thread_id]
        assert fleet.parked.park is not None
        assert (park["parked"], park["park_deadline"]) == (True, ts(fleet.parked.park.deadline))
        assert park["status"] == "parked", "an interrupted checkpoint reads parked"
        later = frames.threads(fleet.store, now=fleet.parked.park.deadline + timedelta(seconds=1))
        assert not later.set_index("thread_id").loc[fleet.parked.thread_id, "parked"]
    assert frame["parked"].sum() == (1 if fleet.parked else 0)
    lean = frames.threads(fleet.store, now=now, lean=True)
    pd.testing.assert_frame_equal(lean, frame.drop(columns=["run_id", "status", "max_idle_gap"]))


def test_threads_frame_counts_the_rows_the_plane_lacks_as_the_sweep_does(fleet: Fleet) -> None:
    """`unreplicated`: per thread, its pending and quarantined rows once the store replicates
    (a connection recorded), the counts the sweep's replication filter spares threads by."""
    before = frames.threads(fleet.store)
    assert (before["unreplicated"] == 0).all(), "no connection recorded: nothing to spare"
    if not fleet.replicates:
        return
    fleet.store.record_connection("", "http://plane.invalid")
    frame = frames.threads(fleet.store).set_index("thread_id")
    expected = {
        thread_id: sum(
            1
            for cp in read_thread(fleet.store, thread_id)
            if fleet.left_outbox(cp) is None or (cp.thread_id, cp.seq) == fleet.quarantined
        )
        for thread_id in fleet.threads()
    }
    assert frame["unreplicated"].to_dict() == expected
    assert expected[fleet.completed.thread_id] == 0, "the plane took every row of it"
    assert expected[fleet.failed.thread_id] == len(read_thread(fleet.store, fleet.failed.thread_id))
    assert {t: n for t, n in expected.items() if n} == fleet.store.unreplicated()


def test_threads_and_runs_mid_run_show_the_lease(fleet: Fleet) -> None:
    """While a run holds its lease, threads shows the holder and runs shows it running."""
    thread_id = fleet.snapshots["thread_id"]
    row = fleet.snapshots["threads"].set_index("thread_id").loc[thread_id]
    record_holder = row["lease_holder"]
    assert isinstance(record_holder, str)
    assert record_holder
    assert row["lease_expires_at"] > pd.Timestamp(fleet.end - timedelta(days=1))
    running = fleet.snapshots["runs"].set_index("thread_id").loc[thread_id]
    assert running["status"] == "running"
    assert running["ended_at"] is pd.NaT
    after = frames.threads(fleet.store).set_index("thread_id").loc[thread_id]
    assert after["lease_holder"] is pd.NA, "released at the run end"


# ---------------------------------------------------------------------------- runs and parks


def test_runs_frame_is_run_health(fleet: Fleet) -> None:
    """One row per run: runner, status, start, end, node steps, duration and the failure's error."""
    frame = frames.runs(fleet.store)
    assert_columns(frame, "runs")
    by_run = frame.set_index("run_id")
    done = by_run.loc[fleet.completed.run_id]
    assert (done["runner"], done["status"], done["steps"]) == ("steps", "completed", 3)
    assert (done["started_at"], done["ended_at"]) == (
        pd.Timestamp(T0),
        pd.Timestamp(T0 + timedelta(hours=6)),
    )
    assert done["duration"] == pd.Timedelta(hours=6)
    assert done["error"] is pd.NA
    failed = by_run.loc[fleet.failed.run_id]
    assert (failed["status"], failed["steps"], failed["error"]) == (
        "failed",
        1,
        "ValueError: the review service said no",
    )
    assert failed["duration"] == pd.Timedelta(minutes=30)
    assert by_run.loc[fleet.running.run_id, "status"] == "completed"
    if fleet.parked is not None:
        parked = by_run.loc[fleet.parked.run_id]
        assert (parked["status"], parked["steps"]) == ("parked", 1)
        assert parked["ended_at"] is pd.NaT
        assert parked["duration"] is pd.NaT
    assert len(frame) == len(fleet.threads())


def test_runs_frame_reason_tells_the_failed_runs_apart(target: StoreTarget) -> None:
    """Stopped, aborted, timed-out and erroring runs all read `failed`; `reason` says which
    (as the run end and `durability runs` record it) and `error` holds only the exception."""
    clock = FrozenClock(T0)
    stop, abort = RunControl(), RunControl()

    def stops(state: Any, ctx: RunContext) -> Any:
        stop.stop()
        return state

    def aborts(state: Any, ctx: RunContext) -> Any:
        abort.abort()
        return state

    with target.open(clock=clock) as store:
        then = [wait("then", clock, 1)]
        runs = {
            "cancelled": Runner("stops", [stops, *then]).start(store, {}, control=stop),
            "aborted": Runner("aborts", [aborts, *then]).start(store, {}, control=abort),
            "timeout": Runner(
                "slow", [wait("a", clock, 2), *then], timeout=timedelta(hours=1)
            ).start(store, {}),
            "error": Runner("fails", [explode]).start(store, {}),
            None: Runner("steps", then).start(store, {}),
        }
        frame = frames.runs(store)
        recorded = {r.run_id: r.reason for r in list_runs(store)}
    assert_columns(frame, "runs")
    by_run = frame.set_index("run_id")
    for reason, result in runs.items():
        row = by_run.loc[result.run_id]
        assert row["status"] == ("completed" if reason is None else "failed")
        assert (None if row["reason"] is pd.NA else row["reason"]) == reason
        assert recorded[result.run_id] == reason
        assert (row["error"] is pd.NA) == (reason != "error")


def test_parks_frame_time_left_on_an_injected_clock(fleet: Fleet) -> None:
    """Each pending park with its deadline and the time left at ``now``; expired once past it."""
    frame = frames.parks(fleet.store, now=T0)
    assert_columns(frame, "parks")
    if fleet.parked is None:
        assert frame.empty
        return
    park = fleet.parked.park
    assert park is not None
    (row,) = frame.to_dict("records")
    assert (row["thread_id"], row["run_id"], row["node_id"], row["reason"]) == (
        park.thread_id,
        park.run_id,
        "approve",
        "needs approval",
    )
    assert (row["created_at"], row["deadline"], row["deadline_source"]) == (
        ts(park.created_at),
        ts(park.deadline),
        "declared",
    )
    assert row["time_left"] == pd.Timedelta(park.deadline - T0)
    assert not row["expired"]
    late = frames.parks(fleet.store, now=park.deadline + timedelta(hours=5))
    assert late["time_left"].tolist() == [pd.Timedelta(hours=-5)]
    assert late["expired"].tolist() == [True]


# ---------------------------------------------------------------------------- retention


def test_retention_frame_is_the_sweep_plan(fleet: Fleet) -> None:
    """One row per thread with the sweep's action; a finished thread is due at its mark's due time."""
    threads = frames.threads(fleet.store).set_index("thread_id")
    due = threads.loc[fleet.completed.thread_id, "due_at"]
    before = frames.retention(fleet.store, now=due.to_pydatetime() - timedelta(seconds=1))
    assert_columns(before, "retention")
    assert sorted(before["thread_id"]) == fleet.threads()
    row = before.set_index("thread_id").loc[fleet.completed.thread_id]
    assert (row["horizon"], row["action"], row["due_at"]) == ("finished", "not_due", due)
    assert row["checkpoints"] == threads.loc[fleet.completed.thread_id, "checkpoints"]
    after = frames.retention(fleet.store, now=due.to_pydatetime())
    by_id = after.set_index("thread_id")
    assert by_id.loc[fleet.completed.thread_id, "action"] == "delete", "the plane has its rows"
    failed = by_id.loc[fleet.failed.thread_id]
    assert (failed["action"], failed["due_at"]) == (
        "not_due",
        threads.loc[fleet.failed.thread_id, "due_at"],
    )
    if fleet.parked is not None:
        assert by_id.loc[fleet.parked.thread_id, "horizon"] == "waiting"
    assert fleet.store.thread(fleet.completed.thread_id) is not None, "a plan deletes nothing"


# ---------------------------------------------------------------------------- outbox and backlog


def test_outbox_frame_states_attempts_and_ages(fleet: Fleet) -> None:
    """Pending, synced and quarantined rows with the plane's reason, attempts, last error and age."""
    now = fleet.end + timedelta(hours=2)
    frame = frames.outbox(fleet.store, now=now)
    assert_columns(frame, "outbox")
    if not fleet.replicates:
        assert frame.empty, "a store without an outbox does not replicate"
        return
    rows = fleet.rows()
    assert sorted(zip(frame.thread_id, frame.seq, strict=True)) == sorted(
        (c.thread_id, c.seq) for c in rows
    )
    by_key = frame.set_index(["thread_id", "seq"])
    for cp in rows:
        row = by_key.loc[(cp.thread_id, cp.seq)]
        left = fleet.left_outbox(cp)
        state = (
            "quarantined"
            if (cp.thread_id, cp.seq) == fleet.quarantined
            else "synced"
            if left is not None
            else "pending"
        )
        assert (row["state"], row["checkpoint_id"], row["size_bytes"]) == (
            state,
            cp.checkpoint_id,
            cp.size_bytes,
        )
        assert (row["created_at"], row["synced_at"]) == (ts(cp.created_at), ts(left))
        assert cp.created_at is not None
        assert row["age"] == pd.Timedelta((left or now) - cp.created_at)
        attempted = (cp.thread_id, cp.seq) == fleet.attempted
        assert row["attempts"] == (1 if attempted else 0)
        if attempted:
            assert row["last_error"] == "HTTP 503 from the plane"
        else:
            assert row["last_error"] is pd.NA
    quarantined = by_key.loc[fleet.quarantined]
    assert quarantined["sync_error"] == "payload over the 1048576-byte cap"
    assert frame["created_at"].is_monotonic_increasing


def test_backlog_counts_pending_rows_at_each_instant(fleet: Fleet) -> None:
    """Pending count and oldest pending age at each hour, from created_at and synced_at."""
    end = fleet.end + timedelta(hours=1)
    frame = frames.backlog(fleet.store, freq="1h", start=T0, end=end)
    assert_columns(frame, "backlog")
    if not fleet.replicates:
        assert frame.empty
        return
    instants = pd.date_range(T0, end, freq="1h")
    assert frame["time"].tolist() == list(instants)
    rows = fleet.rows()
    for instant, pending, oldest in zip(
        frame["time"], frame["pending"], frame["oldest_pending_age"], strict=True
    ):
        waiting = [
            c.created_at
            for c in rows
            if c.created_at is not None
            and c.created_at <= instant
            and ((left := fleet.left_outbox(c)) is None or left > instant)
        ]
        assert pending == len(waiting), instant
        assert oldest == (instant - min(waiting) if waiting else pd.NaT), instant
    assert frame["pending"].max() > frame["pending"].iloc[-1] > 0, (
        "the completed run's rows left the backlog when synced"
    )
    default = frames.backlog(fleet.store, freq="1D")
    assert default["time"].iloc[0] == pd.Timestamp(T0).floor("1D")


def test_write_times_are_every_checkpoints_created_at_alone(fleet: Fleet) -> None:
    """The replay's input: one column, each checkpoint's write time."""
    frame = frames.write_times(fleet.store)
    assert_columns(frame, "write_times")
    assert sorted(frame["created_at"]) == sorted(pd.Timestamp(c.created_at) for c in fleet.rows())


def test_activity_counts_checkpoints_and_bytes_per_bucket_in_the_store(fleet: Fleet) -> None:
    """One row per hour holding a checkpoint: the rows written then and their bytes."""
    frame = frames.activity(fleet.store, "1h")
    assert_columns(frame, "activity")
    rows = fleet.rows()
    hours = pd.Series([pd.Timestamp(c.created_at).floor("1h") for c in rows])
    sizes = pd.Series([c.size_bytes for c in rows])
    assert frame["time"].tolist() == sorted(hours.unique())
    assert frame["checkpoints"].tolist() == hours.value_counts().sort_index().tolist()
    assert frame["size_bytes"].tolist() == sizes.groupby(hours).sum().sort_index().tolist()
    with pytest.raises(ConfigError, match="width='1M' is not a fixed pandas duration"):
        frames.activity(fleet.store, "1M")


def test_outbox_states_are_the_outbox_frame_summed(fleet: Fleet) -> None:
    """Rows, bytes and attempts per state, counted in the store, equal the whole outbox's sums,
    and the backlog's SQL grouping equals the chunked default's."""
    if fleet.store.outbox is None:
        assert frames.outbox_states(fleet.store).empty
        return
    whole = frames.outbox(fleet.store)
    summed = whole.groupby("state", observed=True)[["size_bytes", "attempts"]].sum()
    states = frames.outbox_states(fleet.store).set_index("state")
    assert states["rows"].to_dict() == whole["state"].value_counts()[states.index].to_dict()
    assert states["size_bytes"].to_dict() == summed["size_bytes"].to_dict()
    assert states["attempts"].to_dict() == summed["attempts"].to_dict()
    for step, origin in ((3_600_000_000, 0), (900_000_000, 123)):
        expected = Aggregates(fleet.store).pending_spans(step, origin)
        assert fleet.store.scans.pending_spans(step, origin) == expected


def test_a_release_never_changes_the_backlog_of_the_past(fleet: Fleet) -> None:
    """Releasing the quarantined row, then the plane taking it, changes no instant before the
    release: the span it was pending before its quarantine is kept in the outbox's history,
    and from the release until the plane takes it, it counts again with its age from its write."""
    if fleet.store.outbox is None:
        pytest.skip("no outbox: nothing is ever quarantined or released")
    fleet.clock.advance(timedelta(days=2))
    released_at = fleet.clock()
    before = frames.backlog(fleet.store, freq="1h", start=T0, end=released_at)
    assert fleet.store.outbox.release() == 1
    [span] = fleet.store.outbox.history()
    assert (span.pending_until, span.released_at) == (fleet.quarantined_at, released_at)
    [entry] = [e for e in fleet.store.outbox.entries() if (e.thread_id, e.seq) == fleet.quarantined]
    assert (entry.state, entry.pending_since) == ("pending", released_at)
    fleet.clock.advance(timedelta(hours=3))
    fleet.store.mark_synced([fleet.quarantined])
    taken_at = fleet.clock()
    end = taken_at + timedelta(hours=2)
    after = frames.backlog(fleet.store, freq="1h", start=T0, end=end)
    past = after[after["time"] < released_at].reset_index(drop=True)
    pd.testing.assert_frame_equal(past, before[before["time"] < released_at])
    again = after[(after["time"] >= released_at) & (after["time"] < taken_at)]
    assert (again["pending"] == before["pending"].iloc[-1] + 1).all()
    written = fleet.store.get(*fleet.quarantined[:1], entry.checkpoint_id).created_at
    assert (again["oldest_pending_age"] >= again["time"] - pd.Timestamp(written)).all()
    assert (after[after["time"] >= taken_at]["pending"] == before["pending"].iloc[-1]).all()


def test_a_bad_backlog_frequency_is_refused_by_name(fleet: Fleet) -> None:
    """An unknown pandas frequency names the value and examples of good ones."""
    if not fleet.replicates:
        pytest.skip("no outbox: the frame is empty before any frequency is read")
    with pytest.raises(Exception, match="'fortnightly'"):
        frames.backlog(fleet.store, freq="fortnightly")


def test_empty_store_frames_have_the_documented_columns(target: StoreTarget) -> None:
    """A store with nothing in it still returns every column with its dtype."""
    with target.open() as store:
        for name in ("checkpoints", "threads", "outbox", "parks", "runs", "backlog"):
            assert_columns(getattr(frames, name)(store), name)


# ---------------------------------------------------------------------------- foreign stores


@pytest.fixture(scope="module")
def fastaiagent_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """A local.db written by the real fastaiagent SDK, and what the SDK says it wrote."""
    import json

    from conftest import fastaiagent_sdk

    work = tmp_path_factory.mktemp("fastaiagent-frames")
    db = work / "local.db"
    return db, json.loads(fastaiagent_sdk("sqlite", str(db), cwd=work))


def test_frames_of_a_fastaiagent_store(fastaiagent_db: tuple[Any, dict[str, Any]]) -> None:
    """A fastaiagent local.db: every frame's numbers are what the SDK wrote; the file is untouched."""
    from test_foreign_stores import SETTINGS, _digest

    import durability
    from durability.stores.foreign import parse_time

    db, written = fastaiagent_db
    before = _digest(db)
    now = datetime.now(UTC)
    with durability.open(f"fastaiagent+sqlite:///{db}", settings=SETTINGS) as store:
        cps = frames.checkpoints(store)
        assert_columns(cps, "checkpoints")
        for eid, rows in written.items():
            mine = cps[cps.thread_id == eid]
            assert mine["checkpoint_id"].tolist() == [r["checkpoint_id"] for r in rows]
            assert mine["node_id"].tolist() == [r["node_id"] for r in rows]
            assert mine["status"].tolist() == [status_word(r["status"]) for r in rows]
            assert mine["step"].tolist() == [r["node_index"] for r in rows]
            assert mine["created_at"].tolist() == [
                pd.Timestamp(parse_time(r["created_at"])) for r in rows
            ]
            assert (mine["run_id"] == eid).all()
        resumed = cps[cps.thread_id == "exec-resumed"]
        assert resumed["synced"].tolist()[:2] == [True, True]
        assert resumed["sync_error"].iloc[0] is pd.NA
        assert "over the 1048576-byte cap" in resumed["sync_error"].iloc[1]
        assert int((~cps["synced"]).sum()) == sum(len(r) for r in written.values()) - 2

        ths = frames.threads(store, now=now).set_index("thread_id")
        assert_columns(frames.threads(store, now=now), "threads")
        assert sorted(ths.index) == sorted(written)
        for eid, rows in written.items():
            times = [parse_time(r["created_at"]) for r in rows]
            assert ths.loc[eid, "checkpoints"] == len(rows)
            assert ths.loc[eid, "newest_at"] == pd.Timestamp(max(t for t in times if t))
            assert ths.loc[eid, "status"] == status_word(rows[-1]["status"])
            assert ths.loc[eid, "size_bytes"] == sum(c.size_bytes or 0 for c in store.history(eid))
        assert ths["parked"].to_dict() == {eid: eid == "exec-paused" for eid in written}

        run = frames.runs(store).set_index("run_id")
        assert_columns(frames.runs(store), "runs")
        assert run.loc["exec-failed", "status"] == "failed"
        assert "payment gateway down" in run.loc["exec-failed", "error"]
        assert run.loc["exec-failed", "reason"] is pd.NA, "the SDK records no reason for an error"
        assert run.loc["exec-resumed", "status"] == "completed"
        assert run.loc["exec-paused", "status"] == "parked"

        box = frames.outbox(store, now=now)
        assert_columns(box, "outbox")
        assert box["state"].value_counts().to_dict() == {
            "pending": len(cps) - 2,
            "synced": 1,
            "quarantined": 1,
        }
        (park,) = frames.parks(store, now=now).to_dict("records")
        assert (park["thread_id"], park["deadline_source"]) == ("exec-paused", "horizon")
        assert park["deadline"] - park["created_at"] == pd.Timedelta(SETTINGS.waiting_retention)
    assert _digest(db) == before


def test_frames_of_a_langgraph_sqlite_store(tmp_path: Any) -> None:
    """A LangGraph SqliteSaver file: threads, checkpoints and statuses as the saver wrote them."""
    from test_foreign_stores import langgraph_sqlite_unchanged

    import durability

    with langgraph_sqlite_unchanged(tmp_path) as (url, saver), durability.open(url) as store:
        cps = frames.checkpoints(store)
        assert_columns(cps, "checkpoints")
        own = {
            t: list(saver.list({"configurable": {"thread_id": t}}))
            for t in ("waiting", "done", "blocked")
        }
        assert cps.groupby("thread_id").size().to_dict() == {t: len(v) for t, v in own.items()}
        done = cps[cps.thread_id == "done"]
        assert done["checkpoint_id"].tolist() == [
            t.config["configurable"]["checkpoint_id"] for t in reversed(own["done"])
        ]
        assert done["status"].tolist() == ["completed"] * 4
        assert done["synced"].isna().all(), "a LangGraph store keeps no outbox"
        ths = frames.threads(store).set_index("thread_id")
        assert ths.loc["waiting", "status"] == "parked"
        assert ths.loc["done", "checkpoints"] == 4
        assert ths.loc["done", "newest_at"] == pd.Timestamp(own["done"][0].checkpoint["ts"])
        assert not ths["parked"].any(), "a LangGraph interrupt is a waiting thread, not a park"
        assert frames.outbox(store).empty
        assert frames.parks(store).empty
        assert_columns(frames.runs(store), "runs")


# ---------------------------------------------------------------------------- run health from a plane


def test_plane_runs_read_the_same_run_health_from_the_plane(tmp_path: Any, plane: Any) -> None:
    """Runs replicated to the real plane read back with the local frame's ids, statuses, times and errors."""
    from plane_support import fast_backoff

    import durability
    from durability.replication.connection import connect, disconnect
    from durability.settings import Settings

    clock = FrozenClock(T0)
    with durability.open(
        f"sqlite:///{tmp_path / 'local.db'}", settings=Settings(), clock=clock, single_worker=True
    ) as store:
        Runner("steps", [wait("a", clock, 1), wait("b", clock, 3)]).start(store, {})
        Runner("fails", [wait("a", clock, 0.5), explode]).start(store, {})
        runner_defs.approval.start(store, {"topic": "plane"})
        conn = connect(
            store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff(), background=False
        )
        try:
            conn.drain()
            local = frames.runs(store)
            remote = frames.plane_runs(conn)
            assert_columns(remote, "runs")
            columns = ["run_id", "thread_id", "runner", "status", "started_at", "ended_at"]
            columns += ["steps", "duration", "reason", "error"]
            key = ["thread_id", "run_id"]
            assert remote[columns].sort_values(key, ignore_index=True).astype(object).to_dict(
                "records"
            ) == local[columns].sort_values(key, ignore_index=True).astype(object).to_dict(
                "records"
            )
            assert set(remote["status"]) == {"completed", "failed", "parked"}
            plane.plane.history = False  # a plane that serves no history: health per execution
            health = frames.plane_runs(conn)
            assert_columns(health, "runs")
            assert (
                health.set_index("thread_id")["status"].to_dict()
                == local.set_index("thread_id")["status"].to_dict()
            )
        finally:
            disconnect(store, timeout=5)


def test_an_unknown_column_is_refused_by_name() -> None:
    """Asking a store for a column it does not read names the column and the known ones."""
    import durability
    from durability.errors import InvalidIdError

    with (
        durability.open("memory://") as store,
        pytest.raises(InvalidIdError, match=r"\['state'\] are not among"),
    ):
        store.checkpoint_columns(columns=["thread_id", "state"])
