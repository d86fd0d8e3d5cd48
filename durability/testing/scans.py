"""The scans' checks: the thread search a picker pages through."""

from __future__ import annotations

from durability.clock import FrozenClock
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
