"""The analyses against answers computed by hand on a small store, on every provider."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from conftest import PROVIDERS, make_target

from durability import analyses, codec
from durability.analyses import charts
from durability.clock import FrozenClock
from durability.model import Checkpoint
from durability.settings import Settings
from durability.simulate import Policy
from durability.stores.base import Store

T0 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
DAY = timedelta(days=1)
NOW = T0 + 28 * DAY
IN_FORCE = Policy(10 * DAY, 2 * DAY)
PROPOSED = Policy(5 * DAY, 2 * DAY)


def ts(day: float) -> pd.Timestamp:
    return pd.Timestamp(T0 + day * DAY)


@dataclass
class Small:
    """Thread a (owner alpha, runner r1): days 0, 1 and 10; b (beta, r2): day 2, finished on
    day 3; c (no owner, no runner): day 25. ``size[(thread, day)]`` is each checkpoint's size."""

    store: Store
    size: dict[tuple[str, int], int]
    seq: dict[tuple[str, int], int]


A_STATE = {"messages": "x" * 1000, "notes": "y" * 100}
B_STATE = {"messages": "z" * 5000}
C_STATE = {"notes": "w"}


def _write(store: Store, clock: FrozenClock) -> Small:
    size, seq = {}, {}
    plan = [
        ("a", 0, "plan", "r1", A_STATE),
        ("a", 1, "act", "r1", A_STATE),
        ("b", 2, "plan", "r2", B_STATE),
        ("a", 10, "act", "r1", A_STATE),
        ("c", 25, "act", "", C_STATE),
    ]
    assert store.ledger is not None
    for thread, day, node, runner, state in plan:
        clock.set(T0 + day * DAY)
        if thread in ("a", "b") and day in (0, 2):
            owner = "alpha" if thread == "a" else "beta"
            store.ledger.record_run_start(thread, run_id=f"run-{thread}", owner=owner)
        cp = store.put(Checkpoint(thread_id=thread, node_id=node, runner=runner, state=state))
        size[(thread, day)], seq[(thread, day)] = cp.size_bytes or 0, cp.seq or 0
        if thread == "b":
            clock.set(T0 + 3 * DAY)
            store.ledger.mark_finished("b")
    clock.set(NOW)
    return Small(store, size, seq)


@pytest.fixture(params=PROVIDERS)
def small(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Small]:
    clock = FrozenClock(T0)
    settings = Settings(waiting_retention="10d", finished_retention="2d")
    for target in make_target(request.param, tmp_path):
        with target.open(clock=clock, settings=settings) as store:
            yield _write(store, clock)


def _bytes(s: Small, *keys: tuple[str, int]) -> int:
    return sum(s.size[k] for k in keys)


A = (("a", 0), ("a", 1), ("a", 10))


def test_where_the_bytes_are(small: Small) -> None:
    s, store = small, small.store
    owners = analyses.bytes_by(store, "owner").set_index("owner")
    assert owners.loc["alpha", ["threads", "checkpoints", "size_bytes"]].tolist() == [
        1,
        3,
        _bytes(s, *A),
    ]
    assert owners.loc["beta", "size_bytes"] == s.size[("b", 2)]
    assert owners.loc["(none)", "size_bytes"] == s.size[("c", 25)]
    assert abs(owners["share"].sum() - 1.0) < 1e-9
    runners = analyses.bytes_by(store, "runner").set_index("runner")
    assert runners["size_bytes"].to_dict() == {
        "r2": s.size[("b", 2)],
        "r1": _bytes(s, *A),
        "(none)": s.size[("c", 25)],
    }
    nodes = analyses.bytes_by(store, "node").set_index("node")
    assert nodes.loc["plan", ["threads", "checkpoints", "size_bytes"]].tolist() == [
        2,
        2,
        _bytes(s, ("a", 0), ("b", 2)),
    ]
    assert nodes.loc["act", ["threads", "checkpoints", "size_bytes"]].tolist() == [
        2,
        3,
        _bytes(s, ("a", 1), ("a", 10), ("c", 25)),
    ]
    keys = analyses.bytes_by_state_key(store, sample=100).set_index("key")
    enc = lambda v: len(codec.dumps(v).encode())  # noqa: E731
    assert keys.loc["messages", ["checkpoints", "sample_bytes"]].tolist() == [
        4,
        3 * enc(A_STATE["messages"]) + enc(B_STATE["messages"]),
    ]
    assert keys.loc["notes", ["checkpoints", "sample_bytes"]].tolist() == [
        4,
        3 * enc("y" * 100) + enc("w"),
    ]
    assert keys.attrs["sampled"] == keys.attrs["population"] == 5
    two = analyses.bytes_by_state_key(store, sample=2, seed=1)
    assert two.attrs["sampled"] == 2, "the frame says it is a sample"
    assert analyses.largest_threads(store, 2)["thread_id"].tolist() == ["b", "a"]
    top = analyses.largest_checkpoints(store, 1)
    assert top[["thread_id", "size_bytes", "node_id"]].values.tolist() == [
        ["b", s.size[("b", 2)], "plan"]
    ]
    assert top["created_at"].tolist() == [ts(2)]
    assert charts.where_bytes(
        analyses.bytes_by(store, "owner"),
        analyses.bytes_by(store, "runner"),
        analyses.bytes_by(store, "node"),
        keys.reset_index(),
    ).axes


def test_restore_readiness(small: Small) -> None:
    s, store = small, small.store
    if store.outbox is None:
        frame = analyses.readiness(store)
        assert set(frame["restorable"]) == {"nothing"}
        assert set(frame["why"]) == {analyses.NEVER_CONNECTED}
        assert frame.set_index("thread_id")["lost_bytes"].to_dict() == {
            "a": _bytes(s, *A),
            "b": s.size[("b", 2)],
            "c": s.size[("c", 25)],
        }
        return
    store.outbox.record_connection("proj", "http://127.0.0.1:1")
    store.outbox.mark_synced(
        [("a", s.seq[("a", 0)]), ("a", s.seq[("a", 1)]), ("b", s.seq[("b", 2)])]
    )
    store.outbox.mark_quarantined({("c", s.seq[("c", 25)]): "over the cap"})
    frame = analyses.readiness(store).set_index("thread_id")
    assert frame["restorable"].to_dict() == {"a": "partly", "b": "everything", "c": "nothing"}
    assert frame.loc[
        "a", ["restorable_checkpoints", "up_to_seq", "lost_checkpoints", "lost_bytes"]
    ].tolist() == [2, s.seq[("a", 1)], 1, s.size[("a", 10)]]
    assert frame.loc["a", "why"].startswith("pending")
    assert frame.loc["c", "why"] == "quarantined: over the cap"
    assert pd.isna(frame.loc["c", "up_to_seq"])
    owners = analyses.readiness_by_owner(frame.reset_index()).set_index("owner")
    assert owners.loc[
        "alpha", ["threads", "everything", "partly", "nothing", "lost_bytes"]
    ].tolist() == [1, 0, 1, 0, s.size[("a", 10)]]
    assert owners.index.tolist()[0] in ("alpha", "(none)"), "most lost bytes first"
    assert charts.readiness_chart(owners.reset_index()).axes


def test_growth_forecast(small: Small) -> None:
    s, store = small, small.store
    frame = analyses.forecast(store, [IN_FORCE, PROPOSED], days=3, now=NOW)
    assert frame.attrs["finished_share"] == pytest.approx(1 / 3)
    assert frame.attrs["span"] == timedelta(0)  # median of 10d, 0, 0
    mine = frame[frame.role == "in force"]
    assert mine["day"].tolist() == [ts(28), ts(29), ts(30)]
    # Existing: only c survives the sweep at NOW. Coming: Monday writes a0/4, Tuesday a1/4,
    # Wednesday b/4; a day's finished third lives 2 days, the waiting two thirds 10.
    a0, a1, b = s.size[("a", 0)] / 4, s.size[("a", 1)] / 4, s.size[("b", 2)] / 4
    c = s.size[("c", 25)]
    assert mine["size_bytes"].tolist() == [
        c + round(a0),
        c + round(a0 + a1),
        c + round(2 / 3 * a0 + a1 + b),
    ]
    # New threads: one a Monday (a), one a Wednesday (b), one a Friday (c): 1/4 a day each.
    assert mine["threads"].tolist() == [
        1 + round(0.25),
        1 + round(0.25),
        1 + round(2 / 3 * 0.25 + 0.25),
    ]
    limit = c + round(a0 + a1)
    assert analyses.crossing(frame, limit)[IN_FORCE.label] == ts(29)
    assert analyses.crossing(frame, 10**12)[IN_FORCE.label] is None
    assert charts.forecast_chart(frame, limit).axes


def test_retention_backtest(small: Small) -> None:
    s, store = small, small.store
    result = analyses.backtest(store, PROPOSED, in_force=IN_FORCE, days=28, now=NOW)
    days = result.days
    assert len(days) == 56
    force = days[days.role == "in force"].set_index("day")
    prop = days[days.role == "proposed"].set_index("day")
    # In force: b goes on day 5 (finished day 3 + 2d), a on day 20 (day 10 + 10d), c stays.
    assert force.loc[ts(5), "deleted_threads"] == 1
    assert force.loc[ts(20), "deleted_threads"] == 1
    assert force["deleted_threads"].sum() == 2
    assert force.loc[ts(19), "size_bytes"] == _bytes(s, *A)
    assert force.loc[ts(28), "size_bytes"] == s.size[("c", 25)]
    assert force["cut_conversations"].sum() == 0
    # Proposed: a goes on day 6 (day 1 + 5d) although it writes again on day 10: cut; it
    # comes back with day 10's write and goes again on day 15.
    assert prop.loc[ts(6), ["deleted_threads", "cut_conversations"]].tolist() == [1, 1]
    assert prop.loc[ts(12), "size_bytes"] == s.size[("a", 10)]
    assert prop.loc[ts(15), "deleted_threads"] == 1
    assert prop["cut_conversations"].sum() == 1
    (cut,) = result.cuts[result.cuts.policy == PROPOSED.label].to_dict("records")
    assert (cut["thread_id"], cut["owner"], cut["deleted_on"]) == ("a", "alpha", ts(6))
    assert (cut["last_before"], cut["next_turn"], cut["gap"]) == (ts(1), ts(10), 9 * DAY)
    assert days.attrs["caveat"] == analyses.CAVEAT
    assert not days.attrs["longer_than_in_force"]
    fig = charts.backtest_chart(result)
    assert analyses.CAVEAT.split(":")[0] in fig.axes[0].get_title().replace("\n", " ")
