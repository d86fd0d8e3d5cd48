"""The scans' checks: the thread search a picker pages through, counts per time bucket."""

from __future__ import annotations

from datetime import timedelta

from durability.clock import FrozenClock, to_micros
from durability.errors import InvalidIdError
from durability.testing.suite import START, StoreTarget, check, raises, sample


@check
def check_find_threads(target: StoreTarget) -> None:
    """Thread ids by prefix in code point order, a page at a time, each id once."""
    ids = ["order-1", "order-10", "order-2", "orders", "Order-3", "order-é", "other", "o"]
    with target.open(clock=FrozenClock(START)) as store:
        for thread_id in ids:
            store.put(sample(thread_id, 0))
            store.put(sample(thread_id, 1))
        find = store.scans.find_threads
        assert find("order-") == ["order-1", "order-10", "order-2", "order-é"]
        assert find("order-", limit=2) == ["order-1", "order-10"]
        assert find("order-", after="order-10", limit=2) == ["order-2", "order-é"]
        assert find("order-", after="order-é") == []
        assert find("O") == ["Order-3"], "a prefix is case-sensitive"
        assert find("") == sorted(ids)
        assert find("zzz") == []
        raises(InvalidIdError, lambda: find("order", limit=0))


@check
def check_checkpoint_buckets(target: StoreTarget) -> None:
    """Checkpoints and bytes per time bucket, counted by the store, oldest bucket first."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        written = []
        for n, hours in enumerate((0, 1, 23, 24, 49)):
            clock.set(START + timedelta(hours=hours))
            written.append(store.put(sample(f"t-bucket-{n % 2}", n)))
        day = 86_400_000_000
        buckets = store.scans.checkpoint_buckets(timedelta(days=1))
        first = to_micros(START) // day * day
        by_day: dict[int, list[int]] = {}
        for cp in written:
            assert cp.created_at is not None
            at = to_micros(cp.created_at) // day * day
            by_day.setdefault(at, []).append(cp.size_bytes or 0)
        assert buckets["bucket"] == sorted(by_day)
        assert buckets["bucket"][0] == first
        assert buckets["checkpoints"] == [len(by_day[b]) for b in sorted(by_day)]
        assert buckets["size_bytes"] == [sum(by_day[b]) for b in sorted(by_day)]
        raises(InvalidIdError, lambda: store.scans.checkpoint_buckets(timedelta(0)))
        # ``last``: the writes of 25 hours up to the newest (hour 49): hours 24 and 49 only.
        recent = store.scans.checkpoint_buckets(timedelta(days=1), last=timedelta(hours=25))
        kept = [cp for cp in written[3:] if cp.created_at is not None]
        assert recent["bucket"] == sorted({to_micros(cp.created_at) // day * day for cp in kept})  # type: ignore[arg-type]
        assert recent["checkpoints"] == [1, 1]
        assert recent["size_bytes"] == [cp.size_bytes for cp in kept]
