"""Checks across processes and lost server connections (targets that allow them)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from durability.clock import FrozenClock
from durability.model import PendingWrite
from durability.settings import Settings
from durability.stores import open_store
from durability.testing.suite import (
    START,
    StoreTarget,
    assert_writers_ordered,
    check,
    requires,
    sample,
)


def process_context() -> Any:
    """How the cross-process checks start processes: a fork server where the platform has one
    (each child is forked from a clean process that already imported the stores), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["durability.testing", "durability.stores.sql", "durability.stores.redis"]
    )
    return ctx


def in_processes(
    fn: Callable[..., None], calls: Sequence[tuple[Any, ...]], timeout: float
) -> tuple[list[int | None], Any]:
    """Run ``fn(*args, start, out)`` in a process of its own for each ``args`` of ``calls``,
    all released at once by the event ``start``; wait up to ``timeout`` seconds for each.
    Returns their exit codes and the queue ``out`` they answer on."""
    ctx = process_context()
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=fn, args=(*args, start, out)) for args in calls]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout)
    return [p.exitcode for p in procs], out


def _write_in_process(
    url: str, options: dict[str, Any], thread_id: str, worker: int, count: int, start: Any, out: Any
) -> None:
    options = {k: v for k, v in options.items() if k not in ("clock",)}
    try:
        with open_store(url, settings=Settings(), **options) as store:
            start.wait()
            for n in range(count):
                store.put(sample(thread_id, n, node_id=f"p{worker}-{n}"))
    except BaseException as exc:
        out.put(f"writer {worker}: {exc!r}")
        raise
    out.put(None)


@check
@requires("cross_process")
def check_two_processes_write_one_thread(target: StoreTarget) -> None:
    """Two processes writing one thread lose nothing; seqs stay unique and each writer's order holds."""
    calls = [(target.url, target.options, "t-two-procs", w, 40) for w in range(2)]
    codes, out = in_processes(_write_in_process, calls, timeout=120)
    errors = [out.get(timeout=10) for _ in codes]
    assert errors == [None, None], errors
    assert codes == [0, 0], codes
    with target.open() as store:
        seqs = assert_writers_ordered(store.history("t-two-procs"), "p", 2, 40)
        latest = store.latest("t-two-procs")
        assert latest is not None
        assert latest.seq == seqs[-1]


@check
@requires("kill_connections")
def check_reconnects_after_lost_connections(target: StoreTarget) -> None:
    """The server drops the store's connections between writes: it reconnects and loses nothing acknowledged."""
    assert target.kill_connections is not None
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        acked = [store.put(sample("t-lost", n)) for n in range(3)]
        for n in range(3, 6):
            killed = target.kill_connections()
            assert killed, "the hook found none of the store's connections to drop"
            acked.append(store.put(sample("t-lost", n)))
            target.kill_connections()
            latest = store.latest("t-lost")
            assert latest is not None
            assert latest.checkpoint_id == acked[-1].checkpoint_id
        target.kill_connections()
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-lost",
                    checkpoint_id=acked[-1].checkpoint_id,
                    task_id="t",
                    idx=0,
                    channel="c",
                    value=n,
                )
            ]
        )
        target.kill_connections()
        record = store.record_run_start("t-lost", run_id="r", owner="o")
        assert record.checkpoints == 6
        target.kill_connections()
        assert store.acquire_lease("t-lost", "w", timedelta(minutes=1)).holder == "w"
    with target.open() as again:
        assert [c.checkpoint_id for c in again.history("t-lost")] == [
            c.checkpoint_id for c in acked
        ]
        assert [w.value for w in again.writes("t-lost", acked[-1].checkpoint_id)] == [5]
