"""What the erased-thread check adds to a put, per provider, measured in one process.

Run with ``.venv/bin/python benchmarks/bench_tombstones.py [--rounds 30] [--batch 200]``. Two
handles on one store location: one as shipped (the put checks the thread's tombstone: SQL's
``NOT EXISTS`` probe inside the insert, Redis's ``EXISTS`` in the put script), one with that check
taken out of its statement or script (the only difference). Batches of ``--batch`` puts of a
~2 KB state alternate between the two, ``--rounds`` times, so both see the same machine load;
the medians and their ratio are printed, and the HMAC of a thread id (cached per handle) timed
alone. The store holds 1,000 tombstones of other threads, so the probe finds a populated index.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durability
from durability.model import Checkpoint
from durability.settings import Settings
from durability.stores.redis.scripts import source
from durability.stores.tombstones import keyed_hash

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
STATE = {"messages": [{"role": "user", "content": "x" * 180, "n": i} for i in range(9)]}


def _unchecked(store: Any) -> None:
    """Take the tombstone check out of this handle's put (the benchmark's baseline)."""
    if store.provider == "redis":
        text = source("put").replace(
            "if redis.call('EXISTS', E) == 1 then return {'erased'} end\n", ""
        )
        store._scripts["put"] = store.client.register_script(text)
        return
    sql = store.sql.insert
    head, _, _ = sql.partition(" WHERE NOT EXISTS ")
    store.sql.insert = f"{head} WHERE CAST({store.sql.mark} AS TEXT) IS NOT NULL RETURNING seq"


def _rate(store: Any, batch: int, thread: str) -> float:
    start = time.perf_counter()
    for _ in range(batch):
        store.put(Checkpoint(thread_id=thread, state=STATE))
    return batch / (time.perf_counter() - start)


def measure(url: str, rounds: int, batch: int, **options: Any) -> tuple[float, float]:
    """Median puts/s of the shipped handle and of the unchecked one."""
    settings = Settings()
    with (
        durability.open(url, settings=settings, **options) as checked,
        durability.open(url, settings=settings, **options) as unchecked,
    ):
        assert checked.tombstones is not None
        for n in range(1000):
            checked.tombstones.bury(f"erased-{n}")
        _unchecked(unchecked)
        rates: dict[str, list[float]] = {"checked": [], "unchecked": []}
        for r in range(rounds):
            pair = [("checked", checked), ("unchecked", unchecked)]
            for name, store in pair if r % 2 == 0 else pair[::-1]:
                rates[name].append(_rate(store, batch, f"t{r % 20}"))
        return statistics.median(rates["checked"]), statistics.median(rates["unchecked"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:10]
    print("| store | put with the check (median/s) | without (median/s) | with/without |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        targets: list[tuple[str, str, dict[str, Any]]] = [
            ("SQLite", f"sqlite:///{Path(tmp) / 'tomb.db'}", {}),
            ("Postgres", POSTGRES, {"schema": f"bench_tomb_{tag}"}),
            ("Redis", REDIS, {"prefix": f"bench-tomb-{tag}:"}),
        ]
        for label, url, options in targets:
            try:
                with_check, without = measure(url, args.rounds, args.batch, **options)
            finally:
                _cleanup(label, options)
            print(f"| {label} | {with_check:,.0f} | {without:,.0f} | {with_check / without:.2f}× |")
    key, thread = b"k" * 32, "customer-conversation-12345"
    hmac_us = min(timeit.repeat(lambda: keyed_hash(key, thread), number=10_000, repeat=5)) * 100
    print(
        f"\nHMAC of a thread id (uncached): {hmac_us:.2f} µs; cached per handle after the first put"
    )


def _cleanup(label: str, options: dict[str, Any]) -> None:
    if label == "Postgres":
        import sqlalchemy as sa

        with sa.create_engine(POSTGRES).begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')
    elif label == "Redis":
        import redis

        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(match=f"{options['prefix']}*", count=1000):
            client.unlink(key)
        client.close()


if __name__ == "__main__":
    main()
