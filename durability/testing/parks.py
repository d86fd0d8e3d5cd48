"""The parks' checks: the park rules, and claims that have exactly one winner, across threads and processes."""

from __future__ import annotations

import decimal
import threading
from datetime import timedelta
from typing import Any

from durability.clock import FrozenClock
from durability.errors import (
    ParkRefused,
)
from durability.model import Checkpoint
from durability.settings import Settings, declare_retention
from durability.stores import Store, open_store
from durability.testing.processes import in_processes
from durability.testing.suite import (
    START,
    StoreTarget,
    check,
    raises,
    requires,
)


@check
def check_park_rules(target: StoreTarget) -> None:
    """Parks are refused where the store cannot hold one, without a deadline, or past the horizon."""
    clock = FrozenClock(START)
    settings = Settings(waiting_retention=timedelta(days=30))
    with target.open(clock=clock, settings=settings) as store:
        ask = Checkpoint(thread_id="t-park", node_id="approve", run_id="run-1", state={"draft": 1})
        if not store.capabilities.can_park:
            raises(
                ParkRefused,
                lambda: store.park(ask, deadline=START + timedelta(days=1)),
                contains="cannot hold a parked run",
            )
            assert not store.has_thread("t-park")
            assert store.parks is None or store.parks() == []
            return
        raises(ParkRefused, lambda: store.park(ask, deadline=None), contains="no deadline")
        raises(
            ParkRefused,
            lambda: store.park(ask, deadline=START + timedelta(days=31)),
            contains="past",
        )
        store.record_run_start(
            "t-park-declared",
            run_id="r",
            owner="o",
            retention=declare_retention(settings, waiting="1d"),
        )
        short = ask.evolve(thread_id="t-park-declared")
        raises(
            ParkRefused,
            lambda: store.park(short, deadline=START + timedelta(days=2)),
            contains="1d",
        )
        assert not store.has_thread("t-park")
        assert not store.has_thread("t-park-declared")
        cp, park = store.park(
            ask,
            deadline=START + timedelta(days=3),
            reason="needs approval",
            context={"amount": decimal.Decimal("12.50")},
        )
        assert cp.status == "interrupted"
        assert cp.interrupt_reason == "needs approval"
        assert park.checkpoint_id == cp.checkpoint_id
        assert park.deadline == START + timedelta(days=3)
        assert store.get_park("t-park") == park
        assert store.parks is not None
        assert store.parks.pending() == [park]
        raises(
            ParkRefused,
            lambda: store.park(ask.evolve(checkpoint_id=""), deadline=START + timedelta(days=1)),
            contains="already has a pending park",
        )
        assert len(store.history("t-park")) == 1
        assert store.claim_park("t-park") == park
        assert store.claim_park("t-park") is None
        assert store.get_park("t-park") is None


@check
@requires("can_park")
def check_park_claim_has_one_winner(target: StoreTarget) -> None:
    """Of many concurrent claimers on several handles, exactly one gets the park."""
    with target.open() as store:
        store.park(Checkpoint(thread_id="t-race"), deadline=store.clock() + timedelta(days=1))
    handles = [target.open() for _ in range(4)]
    results: list[object] = []
    barrier = threading.Barrier(8)

    def claim(store: Store) -> None:
        barrier.wait()
        results.append(store.claim_park("t-race"))

    workers = [threading.Thread(target=claim, args=(handles[i % 4],)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for h in handles:
        h.close()
    assert sum(r is not None for r in results) == 1, results


def _claim_in_process(
    url: str, options: dict[str, Any], thread_id: str, start: Any, out: Any
) -> None:
    options = {k: v for k, v in options.items() if k not in ("clock",)}
    with open_store(url, settings=Settings(), **options) as store:
        start.wait()
        out.put(store.claim_park(thread_id) is not None)


@check
@requires("cross_process", "can_park")
def check_park_claim_across_processes(target: StoreTarget) -> None:
    """Two (and more) processes race for one park: exactly one wins."""
    with target.open() as store:
        store.park(Checkpoint(thread_id="t-xrace"), deadline=store.clock() + timedelta(days=1))
    calls = [(target.url, target.options, "t-xrace")] * 3
    codes, out = in_processes(_claim_in_process, calls, timeout=60)
    assert codes == [0, 0, 0], f"claimers exited with {codes}"
    wins = [out.get(timeout=10) for _ in codes]
    assert sum(wins) == 1, wins
