"""One sweep per store at a time: a second concurrent sweep is refused naming who holds the
sweep and since when (SQLite, Postgres and Redis, in real processes), a crashed holder's lock
is released, and a sweep counts only the threads whose rows it deleted itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import make_target

from durability import Checkpoint
from durability.clock import FrozenClock
from durability.errors import SweepLocked
from durability.model import ThreadRecord
from durability.stores.base import Store
from durability.stores.sweep_lock import Holder
from durability.sweep import sweep
from durability.testing import StoreTarget

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=40)
THREADS = 300

#: A sweep in its own process: ``URL NOW HOLD``; its live-thread filter prints "holding" (the
#: sweep then holds the store's lock) and sleeps HOLD seconds before the deletes, or with HOLD
#: ``stdin`` waits until its stdin closes (however slow a loaded machine starts the next one).
SWEEPER = """
import json, sys, time
from datetime import datetime
import durability
from durability.errors import SweepLocked
from durability.settings import Settings
from durability.sweep import sweep

url, now, hold = sys.argv[1], datetime.fromisoformat(sys.argv[2]), sys.argv[3]

class Slow:
    owner = "slow"
    def claims(self, store, candidates, now):
        print("holding", flush=True)
        if hold == "stdin":
            sys.stdin.read()
        else:
            time.sleep(float(hold))
        return {}

with durability.open(url, settings=Settings()) as store:
    try:
        result = sweep(store, now=now, filters=[Slow()])
        print(json.dumps({"deleted": len(result.deleted_ids())}), flush=True)
    except SweepLocked as exc:
        print(json.dumps({"refused": str(exc)}), flush=True)
"""


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    yield from make_target(request.param, tmp_path)


def fill(target: StoreTarget, threads: int = THREADS) -> None:
    """``threads`` threads marked finished at T0 (due a week later, on every provider)."""
    with target.open(clock=FrozenClock(T0)) as store:
        for n in range(threads):
            store.put(Checkpoint(thread_id=f"t-{n}", state={"n": n}))
            store.mark_finished(f"t-{n}")


def start_sweeper(url: str, hold: float | str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SWEEPER, url, LATER.isoformat(), str(hold)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def wait_holding(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "holding", (line, proc.stderr.read() if proc.stderr else "")


def outcome(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_a_second_concurrent_sweep_is_refused_naming_the_holder(target: StoreTarget) -> None:
    """Two sweep processes over one store: the second is refused while the first holds the
    lock, naming its process, host and start; every due thread is counted once, by the first."""
    fill(target)
    first = start_sweeper(target.url, hold="stdin")  # holds until outcome() closes its stdin
    wait_holding(first)
    second = outcome(start_sweeper(target.url, hold=0.0))
    assert "refused" in second, second
    message = second["refused"]
    assert f"process {first.pid} on host " in message
    assert " since 20" in message
    assert "one sweep per store at a time" in message
    assert outcome(first) == {"deleted": THREADS}
    third = start_sweeper(target.url, hold=0.0)  # the lock was released
    assert outcome(third) == {"deleted": 0}


@pytest.mark.parametrize("provider", ["sqlite", "postgres"])
def test_a_killed_holder_releases_the_lock(provider: str, tmp_path: Path) -> None:
    """A sweep killed (SIGKILL) while it holds the lock does not block the next one: Postgres
    ends its session and with it the advisory lock; SQLite sees the holder's process is gone."""
    for target in make_target(provider, tmp_path):
        fill(target, threads=20)
        holder = start_sweeper(target.url, hold=600)
        wait_holding(holder)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 20
        while True:
            result = outcome(start_sweeper(target.url, hold=0.0))
            if "refused" not in result or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # Postgres notices the closed session within moments
        assert result == {"deleted": 20}


def test_an_expired_lock_is_taken_over_and_a_live_one_is_not(tmp_path: Path) -> None:
    """SQLite: a lock row of another host is respected until its expiry, then taken over."""
    for target in make_target("sqlite", tmp_path):
        with target.open() as store:
            store.ready()  # the store's migrations create the lock's table
            other = Holder("elsewhere", 4242, time.time(), "their-token")
            lock = store.scans.sweep_lock()
            table = lock._table()  # type: ignore[attr-defined]
            for expires, refused in ((time.time() + 60, True), (time.time() - 1, False)):
                with store.db.engine.connect() as conn:  # type: ignore[attr-defined]
                    conn.execute(table.delete())
                    conn.execute(
                        table.insert().values(
                            name="sweep", holder=other.to_json().decode(), expires_at=expires
                        )
                    )
                if refused:
                    with pytest.raises(SweepLocked, match="process 4242 on host 'elsewhere'"):
                        sweep(store)
                else:
                    assert sweep(store).deleted_ids() == []


def test_a_redis_lock_of_a_crashed_holder_expires(tmp_path: Path) -> None:
    """Redis: the lock is SET NX with an expiry; a holder that never releases (crashed) stops
    blocking once it expires, and a release deletes only the releaser's own lock."""
    for target in make_target("redis", tmp_path):
        with target.open() as store:
            crashed = store.scans.sweep_lock()
            crashed.ttl_ms = 300  # type: ignore[attr-defined]
            crashed.acquire()
            with pytest.raises(SweepLocked, match=f"process {os.getpid()} on host"):
                sweep(store)
            time.sleep(0.4)
            later = store.scans.sweep_lock()
            later.acquire()
            crashed.release()  # not its lock any more: a no-op
            with pytest.raises(SweepLocked):
                store.scans.sweep_lock().acquire()
            later.release()
            assert sweep(store).deleted_ids() == []


class DeletesFirst:
    """A live-thread filter that deletes some due threads itself, as another deleter racing
    the sweep (``durability threads delete``) would, and claims none."""

    owner = "racer"

    def __init__(self, victims: Sequence[str]) -> None:
        self.victims = victims

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        for thread_id in self.victims:
            store.delete_thread(thread_id)
        return {}


@pytest.mark.parametrize("provider", ["memory", "sqlite"])
def test_threads_another_deleter_emptied_are_not_counted(provider: str, tmp_path: Path) -> None:
    """The result and the deleted-threads metric count only threads whose rows this sweep
    deleted: ones another deleter emptied between the plan and the delete are not claimed."""
    from durability import metrics

    for target in make_target(provider, tmp_path):
        fill(target, threads=10)
        counter = metrics.SWEEP_DELETED_THREADS.labels(horizon="finished")
        before = counter._value.get()
        with target.open() as store:
            result = sweep(store, now=LATER, filters=[DeletesFirst(["t-1", "t-2"])])
        assert sorted(result.deleted_ids()) == sorted(
            f"t-{n}" for n in range(10) if n not in (1, 2)
        )
        assert counter._value.get() - before == 8
