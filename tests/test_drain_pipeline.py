"""The drain keeps two ingest requests in flight (decision 0155): acks, order, faults, kills, races.

A plane of this module's own (the real one, uvicorn on loopback over SQLite) sits behind
:class:`Recorder`, ASGI middleware that records every ingest request as it arrives (its items,
and the requests still unanswered at that moment), can hold the first one until released, and
can answer the n-th with a scripted status instead of the plane.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from plane_support import NO_LOCAL_CAPS, read_body, replayed

import durability
from durability import Checkpoint
from durability.plane import PlaneStorage, create_app, serve_in_thread
from durability.replication import DrainReport, connect, disconnect, drain_once
from durability.settings import Settings
from durability.stores.base import Store

INGEST = "/public/v1/checkpoints/ingest"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Request:
    """One ingest request as the plane received it."""

    number: int
    items: list[tuple[str, int]]  # (execution id, sequence) of each item, in body order
    #: The threads of the requests that were still unanswered when this one arrived.
    concurrent_threads: set[str] = field(default_factory=set)

    @property
    def threads(self) -> set[str]:
        return {thread for thread, _ in self.items}


class Recorder:
    """Records ingest requests; ``hold_first`` holds request 1 until ``release``; ``answers``
    maps a request number to a status answered instead of the plane's."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[Request] = []
        self.open: dict[int, Request] = {}
        self.answered = 0
        self.most_in_flight = 0
        self.hold_first = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.answers: dict[int, int] = {}
        #: A status answered instead of the plane's to any request carrying the thread.
        self.fail_threads: dict[str, int] = {}
        #: The status of every answer the plane itself gave.
        self.statuses: list[int] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != INGEST:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        items = [(i["execution_id"], i["sequence"]) for i in json.loads(body)["checkpoints"]]
        with self.lock:
            request = Request(len(self.requests) + 1, items)
            request.concurrent_threads = set().union(*(r.threads for r in self.open.values()))
            self.requests.append(request)
            self.open[request.number] = request
            self.most_in_flight = max(self.most_in_flight, len(self.open))
        try:
            if request.number == 1 and self.hold_first:
                self.held.set()
                await asyncio.to_thread(self.release.wait, 30)
            await self._answer(request.number, body, send, scope)
        finally:
            with self.lock:
                del self.open[request.number]
                self.answered += 1

    async def _answer(self, number: int, body: bytes, send: Any, scope: Any) -> None:
        status = self.answers.get(number)
        with self.lock:
            carried = self.requests[number - 1].threads
        status = next((s for t, s in self.fail_threads.items() if t in carried), status)
        if status is not None:
            start = {"type": "http.response.start", "status": status, "headers": []}
            await send(start)
            await send({"type": "http.response.body", "body": b'{"detail": "scripted"}'})
            return
        replay = replayed(body)

        async def recorded(message: Any) -> None:
            if message["type"] == "http.response.start":
                with self.lock:
                    self.statuses.append(message["status"])
            await send(message)

        await self.app(scope, replay, recorded)


@dataclass
class Served:
    url: str
    storage: PlaneStorage
    recorder: Recorder
    key: str

    def held_rows(self) -> int:
        tenant = self.storage.authenticate(self.key)
        assert tenant is not None
        return self.storage.count(tenant)

    def history(self, thread: str) -> list[int]:
        """The sequences the plane holds for a thread, in its order."""
        tenant = self.storage.authenticate(self.key)
        assert tenant is not None
        items, _ = self.storage.history(tenant, thread, limit=1000, cursor=None)
        return [i["sequence"] for i in items]


def serve(tmp_path: Path, *, compat: bool = False) -> Iterator[Served]:
    storage = PlaneStorage(f"sqlite:///{tmp_path / 'plane.db'}")
    recorder = Recorder(create_app(storage, compat=compat))
    running = serve_in_thread(recorder)
    key = storage.create_key("dom", "proj", entitled=True).api_key
    yield Served(running.url, storage, recorder, key)
    recorder.release.set()
    running.stop()
    storage.close()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path)


@pytest.fixture
def compat_plane(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path, compat=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with durability.open(f"sqlite:///{tmp_path / 'store.db'}", settings=Settings()) as opened:
        yield opened
    disconnect(opened, timeout=5)


def fill(store: Store, threads: int, rows: int, **fields: Any) -> None:
    """``rows`` checkpoints per thread, written thread after thread (``t0`` first)."""
    for t in range(threads):
        store.put_many(
            [
                Checkpoint(thread_id=f"t{t}", node_id=f"n{n}", step=n, state={"n": n}, **fields)
                for n in range(rows)
            ]
        )


def states(store: Store, thread: str | None = None) -> list[str]:
    return [e.state for e in store.outbox() if thread is None or e.thread_id == thread]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def drain_in_thread(conn: Any) -> tuple[threading.Thread, list[DrainReport]]:
    reports: list[DrainReport] = []
    thread = threading.Thread(target=lambda: reports.append(drain_once(conn)), daemon=True)
    thread.start()
    return thread, reports


def test_a_second_batch_goes_out_while_the_first_is_unanswered_and_acks_wait_for_answers(
    store: Store, plane: Served
) -> None:
    """With the first request held, the second reaches the plane and is stored, but no row is
    marked synced before the answer that carried it, and answers settle oldest first."""
    fill(store, threads=4, rows=10)
    plane.recorder.hold_first = True
    conn = connect(store, plane.url, plane.key, background=False, batch_rows=10)
    thread, reports = drain_in_thread(conn)
    wait_for(lambda: plane.recorder.answered >= 1, "the second request's answer")
    assert plane.recorder.held.is_set()
    assert plane.recorder.most_in_flight == 2
    # The second batch (t1) landed while the first (t0) is held; later batches may have gone
    # out beside the held one since, so the plane's count is not fixed here.
    assert plane.history("t0") == []
    assert len(plane.history("t1")) == 10
    assert set(states(store)) == {"pending"}  # their answers wait behind the first's
    plane.recorder.release.set()
    thread.join(30)
    assert reports[0].synced == 40
    assert set(states(store)) == {"synced"}
    assert plane.held_rows() == 40
    assert plane.recorder.most_in_flight == 2
    assert all(plane.history(f"t{t}") == sorted(plane.history(f"t{t}")) for t in range(4))


def test_batches_in_flight_never_carry_the_same_thread(store: Store, plane: Served) -> None:
    """Threads crossing batch boundaries: each request shares no thread with the requests
    unanswered when it arrived, and each thread's rows arrive in write order."""
    fill(store, threads=5, rows=13)
    conn = connect(store, plane.url, plane.key, background=False, batch_rows=10)
    assert drain_once(conn).synced == 65
    requests = plane.recorder.requests
    assert all(not (r.threads & r.concurrent_threads) for r in requests)
    for t in range(5):
        sent = [seq for r in requests for thread, seq in r.items if thread == f"t{t}"]
        assert sent == sorted(sent)
        assert len(sent) == 13
    assert plane.held_rows() == 65


def test_interleaved_threads_are_sent_one_batch_at_a_time(store: Store, plane: Served) -> None:
    """When every batch carries every thread, no second batch can go out beside the first."""
    for n in range(12):
        for t in range(3):
            store.put(Checkpoint(thread_id=f"t{t}", node_id=f"n{n}", step=n, state={"n": n}))
    conn = connect(store, plane.url, plane.key, background=False, batch_rows=6)
    assert drain_once(conn).synced == 36
    assert plane.recorder.most_in_flight == 1
    assert all(plane.history(f"t{t}") == sorted(plane.history(f"t{t}")) for t in range(3))


def test_a_plane_failing_mid_pipeline_stops_the_pass_and_loses_nothing(
    store: Store, plane: Served
) -> None:
    """The second request gets a 503: its rows stay pending with the attempt recorded, batches
    already out are still settled by their own answers, nothing more is sent, and the next
    pass sends the rest once."""
    fill(store, threads=6, rows=10)
    plane.recorder.answers[2] = 503
    conn = connect(store, plane.url, plane.key, background=False, batch_rows=10)
    first = drain_once(conn)
    sent = len(plane.recorder.requests)
    assert first.buffered >= 10
    second_batch = plane.recorder.requests[1].threads
    assert all(s == "pending" for t in second_batch for s in states(store, t))
    failed = [e for e in store.outbox() if e.thread_id in second_batch]
    assert all(e.attempts == 1 and "503" in (e.last_error or "") for e in failed)
    assert sent <= 3  # the failing answer stopped the pass: at most the batch already out
    assert first.synced == 10 * (sent - 1)
    assert drain_once(conn).synced == 60 - first.synced
    assert set(states(store)) == {"synced"}
    assert plane.held_rows() == 60


def test_a_slow_plane_past_the_timeout_is_resent_without_a_duplicate(
    store: Store, plane: Served
) -> None:
    """The first request outlives the client's timeout (the plane stores it later): its rows
    stay pending; the next pass resends them and the plane holds each row once."""
    fill(store, threads=4, rows=10)
    plane.recorder.hold_first = True
    http = httpx.Client(timeout=0.5)
    conn = connect(store, plane.url, plane.key, background=False, batch_rows=10, http=http)
    report = drain_once(conn)
    assert report.buffered >= 10
    assert set(states(store, "t0")) == {"pending"}
    plane.recorder.release.set()
    wait_for(lambda: plane.held_rows() == 10 + report.synced, "the late batch to land")
    assert drain_once(conn).synced == 40 - report.synced
    assert set(states(store)) == {"synced"}
    assert plane.held_rows() == 40
    http.close()


def test_a_refused_batch_is_isolated_while_another_is_in_flight(
    store: Store, compat_plane: Served
) -> None:
    """A compat plane refuses a whole batch for one row (422): only that row is quarantined,
    with the plane's reason; every other row lands once."""
    fill(store, threads=4, rows=10)
    store.put(Checkpoint(thread_id="t1", node_id="bad", step=10, state={}, step_type="s" * 50))
    fill_more = [Checkpoint(thread_id="t9", node_id=f"n{n}", step=n, state={}) for n in range(10)]
    store.put_many(fill_more)
    conn = connect(
        store,
        compat_plane.url,
        compat_plane.key,
        background=False,
        batch_rows=10,
        limits=NO_LOCAL_CAPS,
    )
    report = drain_once(conn)
    assert report.quarantined == 1
    assert report.synced == 50
    quarantined = [e for e in store.outbox() if e.state == "quarantined"]
    assert [e.thread_id for e in quarantined] == ["t1"]
    assert "step_type is 50 characters" in (quarantined[0].sync_error or "")
    assert compat_plane.held_rows() == 50


def test_a_batch_out_when_the_pass_stops_is_not_isolated_until_the_next_pass(
    store: Store, compat_plane: Served
) -> None:
    """The second batch gets a 503 while the third, carrying a row the compat plane refuses,
    is out: the pass sends nothing more (no isolation), the refused batch stays pending with
    its attempt; the next pass isolates it and quarantines only the offender."""
    for t in range(4):
        store.put_many(
            [
                Checkpoint(
                    thread_id=f"t{t}",
                    node_id=f"n{n}",
                    step=n,
                    state={"n": n},
                    step_type="s" * 50 if (t, n) == (2, 5) else None,
                )
                for n in range(10)
            ]
        )
    compat_plane.recorder.fail_threads["t1"] = 503
    conn = connect(
        store,
        compat_plane.url,
        compat_plane.key,
        background=False,
        batch_rows=10,
        limits=NO_LOCAL_CAPS,
    )
    first = drain_once(conn)
    assert len(compat_plane.recorder.requests) == 3
    assert first.synced == 10
    assert first.quarantined == 0
    assert set(states(store, "t2")) == {"pending"}
    assert all(e.attempts == 1 for e in store.outbox() if e.thread_id in ("t1", "t2"))
    compat_plane.recorder.fail_threads.clear()
    second = drain_once(conn)
    assert second.quarantined == 1
    assert second.synced == 29
    assert compat_plane.held_rows() == 39


DRAINER = """
import sys
import durability
from durability.replication import connect, drain_once
from durability.settings import Settings
store = durability.open(sys.argv[1], settings=Settings())
conn = connect(store, sys.argv[2], sys.argv[3], background=False, batch_rows=10)
print(drain_once(conn).synced, flush=True)
"""


def drainer(store_url: str, plane: Served) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", DRAINER, store_url, plane.url, plane.key],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_drain_killed_mid_batch_loses_nothing_and_resends_without_duplicates(
    tmp_path: Path, plane: Served
) -> None:
    """SIGKILL while the first batch is held at the plane and the second is answered: the next
    drain (another process's connection) sends every row not acked, and the plane holds
    each row once, every thread complete and in order."""
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    with durability.open(url, settings=Settings()) as store:
        fill(store, threads=4, rows=10)
    plane.recorder.hold_first = True
    process = drainer(url, plane)
    wait_for(lambda: plane.recorder.answered >= 1, "the second request's answer")
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    plane.recorder.release.set()
    wait_for(lambda: plane.held_rows() == 20, "the held batch to land after the kill")
    with durability.open(url, settings=Settings()) as store:
        assert set(states(store)) == {"pending"}  # nothing was acked before the kill
        conn = connect(store, plane.url, plane.key, background=False, batch_rows=10)
        assert drain_once(conn).synced == 40
        assert set(states(store)) == {"synced"}
        disconnect(store, timeout=5)
    assert plane.held_rows() == 40
    assert all(plane.history(f"t{t}") == sorted(plane.history(f"t{t}")) for t in range(4))
    assert all(len(plane.history(f"t{t}")) == 10 for t in range(4))


def test_concurrent_drains_of_one_project_land_each_row_once(tmp_path: Path, plane: Served) -> None:
    """Two processes and two threads of a third drain the same project at once: connecting
    twice in one process returns the same connection, its passes never overlap, every row is
    synced and the plane holds each once (its concurrent ingests answer no 5xx)."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with durability.open(url, settings=Settings()) as store:
        fill(store, threads=30, rows=10)
        conn = connect(store, plane.url, plane.key, background=False, batch_rows=10)
        with durability.open(url, settings=Settings()) as again:
            assert connect(again, plane.url, plane.key, background=False) is conn
        others = [drainer(url, plane) for _ in range(2)]
        threads = [drain_in_thread(conn) for _ in range(2)]
        for thread, _ in threads:
            thread.join(60)
        outputs = [p.communicate(timeout=60) for p in others]
        assert all(p.returncode == 0 for p in others), outputs
        assert set(states(store)) == {"synced"}
        disconnect(store, timeout=5)
    assert plane.held_rows() == 300
    assert plane.recorder.statuses
    assert all(s == 201 for s in plane.recorder.statuses)
