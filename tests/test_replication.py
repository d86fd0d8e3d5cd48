"""Replication against the project's real plane on loopback: the drain, its fixes over the SDK, connections."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import PROVIDERS, make_target
from plane_support import NO_LOCAL_CAPS, PlaneHandle, fast_backoff
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

import durability
from durability import Checkpoint, replication
from durability.errors import CodecError, ReplicationError
from durability.plane import serve_in_thread
from durability.replication import (
    Backoff,
    Connection,
    DrainReport,
    DrainWorker,
    PlaneClient,
    checkpoint_from_wire,
    connect,
    disconnect,
    drain_once,
    outbox_status,
    was_stripped,
)
from durability.replication.wire import store_ids, to_wire, wire_checkpoint_id
from durability.runs import AgentNode, Flow, Runner
from durability.stores.base import Store
from durability.stores.memory import MemoryStore
from durability.testing import HOSTILE_IDS, StoreTarget

REPLICATING = [p for p in [*PROVIDERS, "sqlite-plain"] if p != "memory"]
POISON_STEP = "s" * 50
POISON_REASON = "plane rejected: step_type is 50 characters, over the 40-character limit"


@pytest.fixture(params=REPLICATING)
def rtarget(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """A fresh location on every provider that keeps an outbox."""
    yield from make_target(request.param, tmp_path)


@pytest.fixture
def store(rtarget: StoreTarget) -> Iterator[Store]:
    with rtarget.open() as opened:
        yield opened
    disconnect(opened, timeout=5)


def cp(thread: str, n: int, **fields: Any) -> Checkpoint:
    fields.setdefault("node_id", f"step-{n}")
    fields.setdefault("state", {"n": n, "pad": "x" * 100})
    return Checkpoint(thread_id=thread, checkpoint_id=f"{thread}-{n}", step=n, **fields)


def wait_for(condition: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def states(store: Store, **filters: Any) -> list[str]:
    return [e.state for e in store.outbox(**filters)]


def all_synced(store: Store) -> Callable[[], bool]:
    return lambda: all(s == "synced" for s in states(store))


def link(store: Store, plane: PlaneHandle, **options: Any) -> Connection:
    options.setdefault("http", plane.http())
    options.setdefault("backoff", fast_backoff())
    return connect(store, plane.url, options.pop("key", plane.key), **options)


# ---------------------------------------------------------------------------- the basics


def test_connect_drains_the_backlog_and_marks_rows_synced(store: Store, plane: PlaneHandle) -> None:
    """Rows written before connect replicate at connect; each is marked synced only after the 2xx."""
    written = [store.put(cp("t-backlog", n)) for n in range(30)]
    assert plane.faults.ingest_requests == 0
    link(store, plane)
    wait_for(all_synced(store), what="the backlog to drain")
    assert plane.ids_on_plane("t-backlog") == [c.checkpoint_id for c in written]
    entries = store.outbox()
    assert all(
        e.attempts == 1 and e.last_error is None and e.synced_at is not None for e in entries
    )
    assert [c.project_id for c in store.connections()] == [""]


def test_not_connected_sends_nothing(store: Store, plane: PlaneHandle) -> None:
    """Without a connection strictly nothing is sent; after disconnect, new rows stay pending too."""
    store.put(cp("t-quiet", 0))
    time.sleep(0.2)
    assert plane.faults.ingest_requests == 0
    assert states(store) == ["pending"]
    conn = link(store, plane)
    assert conn.close(timeout=5)
    assert states(store) == ["synced"]
    sent = plane.faults.ingest_requests
    store.put(cp("t-quiet", 1))
    time.sleep(0.2)
    assert plane.faults.ingest_requests == sent
    assert states(store) == ["synced", "pending"]
    assert [c.open for c in store.connections()] == [False], "kept, closed: the store replicates"


def test_restored_rows_are_never_sent(store: Store, plane: PlaneHandle) -> None:
    """A row written with synced=True (what a restore writes) is not replicated back."""
    store.put(cp("t-restored", 0), synced=True)
    fresh = store.put(cp("t-restored", 1))
    link(store, plane).close(timeout=5)
    assert plane.ids_on_plane("t-restored") == [fresh.checkpoint_id]


def test_writes_never_block_on_the_plane(store: Store, plane: PlaneHandle) -> None:
    """With the plane's ingest handler held, put returns at once; the rows follow when it answers."""
    plane.faults.faults.append("hold")
    link(store, plane)
    store.put(cp("t-held", 0))
    assert plane.faults.held.wait(10), "the drain never reached the plane"
    for n in range(1, 21):
        store.put(cp("t-held", n))  # returns although the drain is stuck in the plane
    assert not plane.faults.release.is_set()
    assert "synced" not in states(store)
    plane.faults.release.set()
    wait_for(all_synced(store), what="the held rows")
    assert len(plane.ids_on_plane("t-held")) == 21


def test_a_write_during_an_in_flight_drain_is_sent_by_that_drain(
    store: Store, plane: PlaneHandle
) -> None:
    """The lost-wakeup fix: a row written while a pass waits on the plane goes out in that pass."""
    conn = link(store, plane, background=False)
    store.put(cp("t-wake", 0))
    plane.faults.faults.append("hold")
    reports: list[DrainReport] = []
    drain = threading.Thread(target=lambda: reports.append(drain_once(conn)))
    drain.start()
    assert plane.faults.held.wait(10)
    store.put(cp("t-wake", 1))  # the run's last row, written during the POST
    plane.faults.release.set()
    drain.join(10)
    assert reports[0].synced == 2
    assert reports[0].requests == 2
    assert states(store) == ["synced", "synced"]


def test_nan_is_refused_at_write_so_it_cannot_stall_the_outbox(
    store: Store, plane: PlaneHandle
) -> None:
    """A NaN never reaches the outbox (the codec refuses it at write); later rows replicate."""
    with pytest.raises(CodecError, match=r"state\.score"):
        store.put(cp("t-nan", 0, state={"score": float("nan")}))
    store.put(cp("t-nan", 1))
    link(store, plane).close(timeout=5)
    assert plane.ids_on_plane("t-nan") == ["t-nan-1"]


def test_hostile_ids_end_to_end(store: Store, plane: PlaneHandle) -> None:
    """Ids with / ? # % .. spaces and 10 KB replicate and read back by exactly that id."""
    for hostile in HOSTILE_IDS:
        store.put(
            Checkpoint(
                thread_id=hostile,
                checkpoint_id=hostile,
                node_id=hostile[:100],
                state={"id": hostile},
            )
        )
    link(store, plane).close(timeout=10)
    assert all_synced(store)()
    with PlaneClient(plane.url, plane.key) as client:
        for hostile in HOSTILE_IDS:
            latest = client.latest(hostile)
            assert latest is not None
            assert latest["execution_id"] == hostile
            assert latest["node_id"] == hostile[:100]
            assert checkpoint_from_wire(latest).state == {"id": hostile}
            page = client.history(hostile)
            assert page is not None
            assert [i["checkpoint_id"] for i in page.items] == [hostile]
        assert client.latest("..") is not None
        assert client.latest("nope/..") is None


# ---------------------------------------------------------------------------- connections


def test_one_connection_per_project_each_draining_only_its_rows(
    store: Store, plane: PlaneHandle
) -> None:
    """Two projects go to two tenants; a project nobody connected stays buffered and is reported so."""
    key_a = plane.key
    key_b = plane.new_key()
    for project in ("p-a", "p-b", "p-none"):
        store.put(cp(f"t-{project}", 0, project_id=project))
    link(store, plane, key=key_a, project_id="p-a")
    link(store, plane, key=key_b, project_id="p-b")
    with pytest.raises(
        ReplicationError, match="already has a connection for it with another API key"
    ):
        link(store, plane, key=key_b, project_id="p-a")
    wait_for(
        lambda: (
            states(store, project_id="p-a") == ["synced"]
            and states(store, project_id="p-b") == ["synced"]
        )
    )
    assert plane.ids_on_plane("t-p-a", key_a) == ["t-p-a-0"]
    assert plane.ids_on_plane("t-p-b", key_a) == []
    assert plane.ids_on_plane("t-p-b", key_b) == ["t-p-b-0"]
    assert plane.ids_on_plane("t-p-a", key_b) == []
    status = {s.project_id: s for s in outbox_status(store)}
    assert status["p-none"].pending == 1
    assert status["p-none"].connected_to is None
    assert status["p-a"].synced == 1
    assert status["p-a"].connected_to == plane.url
    assert states(store, project_id="p-none") == ["pending"]


def test_connecting_twice_reuses_the_connection(rtarget: StoreTarget, plane: PlaneHandle) -> None:
    """A second connect of the same database and project to the same plane with the same key
    (a notebook run again, opening its store anew) returns the open connection, which then
    drains the rows written through the new store object; another plane is refused."""
    with rtarget.open() as first, rtarget.open() as second:
        try:
            conn = link(first, plane)
            again = link(second, plane)
            assert again is conn
            assert conn.store is second
            assert len(replication.active_connections()) == 1
            second.put(cp("t-again", 0))
            wait_for(all_synced(second), what="the new store object's row to drain")
            assert plane.ids_on_plane("t-again") == ["t-again-0"]
            with pytest.raises(ReplicationError, match=r"already has a connection for it to http"):
                connect(second, "http://127.0.0.1:9", plane.key)
            assert conn.active
        finally:
            disconnect(second, timeout=5)


def test_bad_key_at_connect_raises_and_leaves_nothing(store: Store, plane: PlaneHandle) -> None:
    """A key the plane refuses fails connect cleanly: no record, no drain, no key in the message."""
    bad = "dpk_not-a-real-key-0123456789"
    with pytest.raises(ReplicationError) as raised:
        link(store, plane, key=bad)
    assert not raised.value.retryable
    assert bad not in str(raised.value)
    assert store.connections() == []
    store.put(cp("t-bad", 0))
    time.sleep(0.1)
    assert plane.faults.ingest_requests == 0


def test_unreachable_plane_at_connect_keeps_rows_buffered(store: Store, plane: PlaneHandle) -> None:
    """A plane that does not answer is not an error: rows stay buffered and the drain retries on a backoff."""
    dead = serve_in_thread(Starlette())
    url = dead.url
    dead.stop()
    store.put(cp("t-dead", 0))
    conn = connect(store, url, plane.key, http=plane.http(0.5), backoff=fast_backoff())
    assert conn.worker is not None
    wait_for(lambda: len(conn.worker.delays) >= 3 if conn.worker else False, what="retries")  # type: ignore[union-attr]
    assert max(conn.worker.delays) <= 0.01
    assert states(store) == ["pending"]
    entry = store.outbox()[0]
    assert entry.attempts >= 3
    assert (entry.last_error or "").startswith("transport error")
    assert conn.close(timeout=2)


def test_disconnect_drains_synchronously(store: Store, plane: PlaneHandle) -> None:
    """disconnect() returns only after the final pass: every row is synced when it returns."""
    link(store, plane)
    for n in range(200):
        store.put(cp("t-final", n))
    assert disconnect(store, timeout=10)
    assert all_synced(store)()
    assert len(plane.ids_on_plane("t-final")) == 200
    assert [c.open for c in store.connections()] == [False]


def test_disconnect_gives_up_at_its_timeout(store: Store, plane: PlaneHandle) -> None:
    """A plane that hangs does not hang disconnect: it returns False at the timeout, rows stay pending."""
    plane.faults.faults.append("hold")
    conn = link(store, plane)
    store.put(cp("t-hang", 0))
    assert plane.faults.held.wait(10)
    started = time.monotonic()
    assert conn.close(timeout=0.3) is False
    assert time.monotonic() - started < 2
    plane.faults.release.set()


def test_custom_store_without_an_outbox_is_a_noop(plane: PlaneHandle) -> None:
    """A store with no outbox operations does not replicate: connecting, writing and closing never fail."""

    class TinyStore(MemoryStore):
        """A custom store: the memory store's contract and nothing optional."""

    store = TinyStore()
    conn = link(store, plane)
    store.put(cp("t-custom", 0))
    assert conn.drain() == DrainReport()
    assert conn.close()
    assert plane.faults.ingest_requests == 0
    assert drain_once(conn) == DrainReport()


def test_api_key_never_appears_in_reprs_logs_or_errors(
    store: Store, plane: PlaneHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is only ever in a header: not in reprs, log lines (at DEBUG) or exception messages."""
    caplog.set_level(logging.DEBUG)
    plane.faults.faults.extend([503, 403, "drop"])
    conn = link(store, plane, background=False)
    store.put(cp("t-secret", 0))
    for _ in range(4):
        drain_once(conn)
    texts = [repr(conn), repr(conn.client), repr(store), caplog.text]
    try:
        PlaneClient(plane.url, plane.key, http=plane.http()).runs(limit=0)
    except ReplicationError as exc:
        texts.append(str(exc))
    assert len(texts) == 5
    assert all(plane.key not in text for text in texts)
    assert states(store) == ["synced"]


def test_agent_id_is_resolved_when_the_batch_is_mapped(store: Store, plane: PlaneHandle) -> None:
    """Rows written before the agent registered still carry its plane id: one identity per run."""
    conn = link(store, plane, background=False)
    for n in range(3):
        store.put(cp("t-agent", n, runner="helper", agent_path="agent:helper"))
    agent_id = conn.register_agent("helper", {"description": "a test agent"})
    assert agent_id is not None
    assert agent_id != "helper"
    assert conn.register_agent("helper") == agent_id, "registration is an upsert by name"
    drain_once(conn)
    with PlaneClient(plane.url, plane.key) as client:
        page = client.history("t-agent")
    assert page is not None
    assert {i["agent_id"] for i in page.items} == {agent_id}
    assert {i["metadata"]["chain_name"] for i in page.items} == {"helper"}


def test_runner_rows_replicate_as_their_resource_under_the_runs_project(
    store: Store, plane: PlaneHandle
) -> None:
    """A runner's rows reach the plane as resource_type ``agent`` with its registered plane id, a
    flow's as ``chain`` under its name (read from the root of ``agent_path``); a flow's
    agent node writes under the flow's project, so the project's connection sends it all."""
    conn = link(store, plane, background=False, project_id="shop")
    helper = Runner("helper", [("answer", lambda s, c: {**s, "answer": 42})])
    support = Flow("support", [AgentNode("ask", helper, "{flow_run_id}-ask")])
    agent_id = conn.register_agent("helper")
    assert agent_id is not None
    solo = helper.start(store, {"q": "solo"}, project_id="shop")
    flow = support.start(store, {"q": "flow"}, project_id="shop")
    assert drain_once(conn).buffered == 0
    assert states(store) == ["synced"] * len(states(store))
    with PlaneClient(plane.url, plane.key) as client:
        seen = {
            thread: client.history(thread)
            for thread in (solo.thread_id, flow.thread_id, f"{flow.run_id}-ask")
        }
    identity = {
        thread: {(i["resource_type"], i["agent_id"], i["chain_id"]) for i in page.items}
        for thread, page in seen.items()
        if page is not None
    }
    assert identity == {
        solo.thread_id: {("agent", agent_id, None)},
        flow.thread_id: {("chain", None, "support")},
        f"{flow.run_id}-ask": {("agent", agent_id, None)},
    }
    assert {i["metadata"]["agent_path"] for i in seen[flow.thread_id].items} == {"flow:support"}


def test_history_support_is_detected_by_a_404(plane: PlaneHandle) -> None:
    """A plane without the history path answers 404 there: the client reports it and falls back to latest."""

    async def latest(request: Any) -> JSONResponse:
        return JSONResponse({"checkpoint_id": "c", "execution_id": "e", "state_snapshot": {}})

    foreign = serve_in_thread(
        Starlette(routes=[Route("/public/v1/checkpoints/{e}/latest", latest)])
    )
    try:
        with PlaneClient(foreign.url, "any-key") as client:
            assert client.supports_history() is False
            assert client.history("e") is None
            assert client.iter_history("e") is None
            latest_item = client.latest("e")
            assert latest_item is not None
            assert latest_item["execution_id"] == "e"
    finally:
        foreign.stop()
    with PlaneClient(plane.url, plane.key) as ours:
        assert ours.supports_history() is True
        page = ours.history("unknown-thread")
        assert page is not None
        assert page.items == []
        assert ours.latest("unknown-thread") is None


# ---------------------------------------------------------------------------- refusals and faults


@pytest.mark.parametrize(
    "fault", [401, 403, 404, 405, 408, 410, 429, 302, 500, 503, "drop", "slow"]
)
def test_every_non_payload_answer_leaves_rows_buffered(
    store: Store, plane: PlaneHandle, fault: Any
) -> None:
    """Connection conditions and transport errors never quarantine: the rows stay pending, with the error."""
    conn = link(store, plane, background=False, http=plane.http(0.3))
    for n in range(5):
        store.put(cp("t-buffer", n))
    plane.faults.faults.append(fault)
    report = drain_once(conn)
    assert (report.synced, report.quarantined, report.buffered, report.requests) == (0, 0, 5, 1)
    assert states(store) == ["pending"] * 5
    assert all(e.attempts == 1 and e.last_error for e in store.outbox())
    wait_for(lambda: drain_once(conn).buffered == 0, what="the retry to land")
    assert states(store) == ["synced"] * 5
    assert len(plane.ids_on_plane("t-buffer")) == 5


def test_403_is_logged_once_and_rows_drain_when_entitled(
    store: Store, plane: PlaneHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the entitlement the rows wait (one WARNING naming it); granted, the retry timer sends them."""
    caplog.set_level(logging.WARNING, logger="durability.replication")
    key = plane.new_key(entitled=False)
    conn = link(store, plane, key=key)
    store.put(cp("t-entitle", 0))
    assert conn.worker is not None
    wait_for(
        lambda: len(conn.worker.delays) >= 5 if conn.worker else False,
        what="several refused passes",
    )  # type: ignore[union-attr]
    warnings = [r for r in caplog.records if "connected_state_plane" in r.getMessage()]
    assert len(warnings) == 1
    assert states(store) == ["pending"]
    plane.storage.set_entitlement(plane.domain, True)
    wait_for(all_synced(store), what="the drain after the entitlement")  # no new write needed


def test_per_item_rejections_quarantine_in_one_request(store: Store, plane: PlaneHandle) -> None:
    """Against the default plane, poison rows are refused one by one in a 201: one request, no bisection."""
    conn = link(store, plane, background=False, limits=NO_LOCAL_CAPS)
    poison = {3, 11, 17}
    for n in range(20):
        store.put(cp("t-items", n, step_type=POISON_STEP if n in poison else "node"))
    report = drain_once(conn)
    assert (report.requests, report.synced, report.quarantined) == (1, 17, 3)
    quarantined = store.outbox(state="quarantined")
    assert [e.checkpoint_id for e in quarantined] == [f"t-items-{n}" for n in sorted(poison)]
    assert {e.sync_error for e in quarantined} == {POISON_REASON}
    assert len(plane.ids_on_plane("t-items")) == 17


@pytest.mark.parametrize("seed", [1, 2])
def test_compat_mode_is_bisected_until_each_offender_stands_alone(
    store: Store, plane: PlaneHandle, seed: int
) -> None:
    """A plane refusing whole batches: each offender is isolated and quarantined with the plane's own
    reason, the rest land, within k·⌈log2 n⌉ + 1 requests."""
    plane.plane.compat = True
    conn = link(store, plane, background=False, limits=NO_LOCAL_CAPS)
    n, k = 64, 3
    poison = set(random.Random(seed).sample(range(n), k))
    for i in range(n):
        store.put(cp("t-compat", i, step_type=POISON_STEP if i in poison else "node"))
    report = drain_once(conn)
    assert report.quarantined == k
    assert report.synced == n - k
    assert report.requests == k + 1, "each refusal names its offender: quarantined, the rest resent"
    assert report.requests <= k * math.ceil(math.log2(n)) + 1
    for entry in store.outbox(state="quarantined"):
        assert entry.checkpoint_id in {f"t-compat-{i}" for i in poison}
        assert entry.sync_error is not None
        assert entry.sync_error.startswith("HTTP 422 from /checkpoints/ingest: ")
        assert "step_type is 50 characters" in entry.sync_error
        assert len(entry.sync_error) <= 300
    assert len(plane.ids_on_plane("t-compat")) == n - k


@pytest.mark.parametrize("status", [400, 409])
def test_400_and_409_refusals_are_bisected_until_each_offender_stands_alone(
    store: Store, plane: PlaneHandle, status: int
) -> None:
    """A batch refused with 400 or 409 naming no row is bisected: each offender is quarantined with
    the plane's answer to it alone and every other row lands, within k·(⌈log2 n⌉ + 2) + 1
    requests (nothing names the offender, so each one also costs a row tried alone and a resend
    of the remainder)."""
    conn = link(store, plane, background=False)
    n, poison = 32, {5, 6, 20}
    for i in range(n):
        store.put(cp("t-refused", i))
    plane.faults.refuse_carrying = {f"t-refused-{i}": status for i in poison}
    report = drain_once(conn)
    assert (report.synced, report.quarantined, report.buffered) == (n - 3, 3, 0)
    assert report.requests <= 3 * (math.ceil(math.log2(n)) + 2) + 1
    quarantined = store.outbox(state="quarantined")
    assert [e.checkpoint_id for e in quarantined] == [f"t-refused-{i}" for i in sorted(poison)]
    assert {e.sync_error for e in quarantined} == {
        f'HTTP {status} from /checkpoints/ingest: {{"detail": "injected refusal"}}'
    }
    assert plane.ids_on_plane("t-refused") == [
        f"t-refused-{i}" for i in range(n) if i not in poison
    ]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """One SQLite store (the request counts do not depend on the provider)."""
    with durability.open(f"sqlite:///{tmp_path / 'bisect.db'}") as opened:
        yield opened
    disconnect(opened, timeout=5)


def poisoned(store: Store, plane: PlaneHandle, n: int, poison: set[int], *, named: bool) -> str:
    """Write n rows, the ``poison`` positions refused: by the compat plane naming the offender,
    or (``named=False``) by the fault layer's 400 naming nothing."""
    thread = f"t-iso-{n}-{len(poison)}-{'named' if named else 'blind'}"
    for i in range(n):
        bad = named and i in poison
        store.put(cp(thread, i, step_type=POISON_STEP if bad else "node", state={"n": i}))
    if named:
        plane.plane.compat = True
    else:
        plane.faults.refuse_carrying = {f"{thread}-{i}": 400 for i in poison}
    return thread


def posted_sizes(conn: Connection) -> list[int]:
    """Record the number of rows of every ingest request the connection sends."""
    sizes: list[int] = []
    ingest = conn.client.ingest

    def counting(body: bytes, ids: set[str]) -> Any:
        sizes.append(len(ids))
        return ingest(body, ids)

    conn.client.ingest = counting  # type: ignore[method-assign]
    return sizes


@pytest.mark.parametrize(("n", "k"), [(8, 1), (64, 1), (100, 1), (64, 3), (32, 5)])
@pytest.mark.parametrize("named", [True, False], ids=["named", "blind"])
@pytest.mark.parametrize("seed", [3, 4])
def test_isolating_k_poison_rows_stays_within_its_request_bound(
    sqlite_store: Store, plane: PlaneHandle, n: int, k: int, named: bool, seed: int
) -> None:
    """Named offenders (this plane's compat refusals) take k + 1 requests, within the issue's
    k·⌈log2 n⌉ + 1; blind refusals take at most k·(⌈log2 n⌉ + 2) + 1, i.e. ⌈log2 n⌉ + 3 for
    one offender (the best any scheme can do blind is ⌈log2 n⌉ + 2: the offender must be
    refused alone and every other row land). The bytes sent stay a few times the batch."""
    poison = set(random.Random(seed).sample(range(n), k))
    thread = poisoned(sqlite_store, plane, n, poison, named=named)
    conn = link(sqlite_store, plane, background=False, limits=NO_LOCAL_CAPS)
    batch = sum(len(to_wire(r).body) + 1 for r in sqlite_store.fetch_unsynced_encoded(limit=n))
    report = drain_once(conn)
    assert (report.synced, report.quarantined, report.buffered) == (n - k, k, 0)
    levels = math.ceil(math.log2(n))
    if named:
        assert report.requests == k + 1 <= k * levels + 1
    else:
        assert report.requests <= k * (levels + 2) + 1
    assert report.bytes_sent <= (k + 2) * batch
    assert [e.checkpoint_id for e in sqlite_store.outbox(state="quarantined")] == [
        f"{thread}-{i}" for i in sorted(poison)
    ]
    assert plane.ids_on_plane(thread) == [f"{thread}-{i}" for i in range(n) if i not in poison]


@pytest.mark.parametrize(
    ("offender", "sizes"),
    [
        (7, [8, 4, 2, 1, 1]),  # each left half lands; the right halves are never posted whole
        (0, [8, 4, 2, 1, 7]),  # each left half is refused; what waited goes in one request
        (5, [8, 4, 2, 1, 1, 2]),  # both: 5 is tried alone, then 6 and 7 go together
    ],
)
def test_a_blind_refusal_posts_one_half_per_level(
    sqlite_store: Store, plane: PlaneHandle, offender: int, sizes: list[int]
) -> None:
    """Without a named offender, only the left half of a refused group is posted: when it lands
    the offender is in the right half, which is split without being posted whole; when it is
    refused, the right half waits for the one request that sends the remainder."""
    thread = poisoned(sqlite_store, plane, 8, {offender}, named=False)
    conn = link(sqlite_store, plane, background=False)
    posted = posted_sizes(conn)
    report = drain_once(conn)
    assert (report.synced, report.quarantined) == (7, 1)
    assert posted == sizes
    assert report.requests == len(sizes) <= math.ceil(math.log2(8)) + 3
    [entry] = sqlite_store.outbox(state="quarantined")
    assert entry.checkpoint_id == f"{thread}-{offender}"


def test_a_409_for_an_id_stored_for_another_execution_quarantines_that_row(
    store: Store, plane: PlaneHandle
) -> None:
    """The plane (compat mode: checkpoint ids unique per tenant) answers 409 to a checkpoint id
    another execution holds, naming the id and the execution; that row alone is quarantined with
    the plane's reason, and its batch-mates (one sharing its id in another thread too) land."""
    plane.plane.compat = True
    conn = link(store, plane, background=False)
    squatted = wire_checkpoint_id("t-second", "", "shared-id")
    squatter = {"checkpoint_id": squatted, "execution_id": "t-squatter", "state_snapshot": {}}
    assert plane.storage.insert(plane.tenant(), [plane.plane.validate(squatter)])[0] == 1
    store.put(Checkpoint(thread_id="t-first", checkpoint_id="shared-id", node_id="a"))
    for n in range(6):
        store.put(cp("t-second", n))
    store.put(Checkpoint(thread_id="t-second", checkpoint_id="shared-id", node_id="b"))
    store.put(cp("t-second", 6))
    report = drain_once(conn)
    assert (report.synced, report.quarantined) == (8, 1)
    [entry] = store.outbox(state="quarantined")
    assert (entry.thread_id, entry.checkpoint_id) == ("t-second", "shared-id")
    assert (entry.sync_error or "").startswith("HTTP 409 from /checkpoints/ingest: ")
    assert "already stored for execution 't-squatter'" in (entry.sync_error or "")
    assert plane.ids_on_plane("t-second") == [f"t-second-{n}" for n in range(7)]
    assert plane.ids_on_plane("t-first") == ["shared-id"]


def test_rejections_naming_ids_outside_the_batch_are_ignored(
    store: Store, plane: PlaneHandle
) -> None:
    """A 201 whose rejections name rows the batch did not carry (one still pending, one unknown)
    quarantines nothing: those rows are sent and synced as usual."""
    conn = link(store, plane, background=False, batch_rows=4)
    for n in range(8):
        store.put(cp("t-misaddressed", n))
    plane.faults.misaddressed = {
        "t-misaddressed-6": "refused before it was sent",
        "never-written": "no such row",
    }
    with PlaneClient(plane.url, plane.key) as client:
        answer = client.ingest(b'{"checkpoints": []}', set())
    assert answer.outcome == "ok"
    assert answer.rejections == {}, "the client keeps only rejections of the batch it sent"
    report = drain_once(conn)
    assert (report.requests, report.synced, report.quarantined) == (2, 8, 0)
    assert states(store) == ["synced"] * 8
    assert plane.ids_on_plane("t-misaddressed") == [f"t-misaddressed-{n}" for n in range(8)]


class SealingEncoder:
    """A customer-held-key encoder (the BYOK seam) that has no key for one tenant's rows."""

    name = "sealed"

    def encode(self, state: dict[str, Any]) -> dict[str, Any]:
        if state.get("tenant") == "acme":
            raise ValueError("no key for tenant 'acme'")
        return {"sealed": state}

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        return dict(payload["sealed"])


def test_a_row_that_cannot_be_mapped_is_quarantined_without_stalling_the_rest(
    store: Store, plane: PlaneHandle
) -> None:
    """A row the drain cannot turn into a wire item is quarantined locally, never sent, and the
    rows before and after it (written later too) replicate."""
    conn = link(store, plane, background=False, encoder=SealingEncoder())
    for n in range(5):
        store.put(cp("t-unmappable", n, state={"n": n, "tenant": "acme" if n == 2 else "other"}))
    report = drain_once(conn)
    assert (report.requests, report.synced, report.quarantined) == (1, 4, 1)
    [entry] = store.outbox(state="quarantined")
    assert entry.checkpoint_id == "t-unmappable-2"
    assert entry.sync_error == (
        "not sent: the stored row cannot be mapped to the wire "
        "(ValueError: no key for tenant 'acme')"
    )
    store.put(cp("t-unmappable", 5, state={"n": 5, "tenant": "other"}))
    assert drain_once(conn).synced == 1
    assert plane.ids_on_plane("t-unmappable") == [f"t-unmappable-{n}" for n in (0, 1, 3, 4, 5)]


def test_a_batch_refused_for_its_total_size_quarantines_nothing(
    store: Store, plane: PlaneHandle
) -> None:
    """A 413 for the whole body (no row named) is bisected, and rows that pass alone are never quarantined."""
    plane.plane.caps = type(plane.plane.caps)(body_bytes=20_000)
    try:
        conn = link(store, plane, background=False)
        for n in range(16):
            store.put(cp("t-body", n, state={"pad": "y" * 4000}))
        report = drain_once(conn)
    finally:
        plane.plane.caps = type(plane.plane.caps)()
    assert report.quarantined == 0
    assert report.synced == 16
    assert report.requests > 1


def test_rows_over_an_announced_cap_are_quarantined_without_being_sent(
    store: Store, plane: PlaneHandle
) -> None:
    """The plane announces 1 MiB and 40 characters; rows over them never leave, and the local write succeeded."""
    conn = link(store, plane, background=False)
    assert conn.limits.state_bytes == 1_048_576
    assert conn.limits.step_type_chars == 40
    store.put(cp("t-cap", 0, state={"blob": "z" * 1_100_000}))
    store.put(cp("t-cap", 1, step_type="s" * 41))
    store.put(cp("t-cap", 2))
    report = drain_once(conn)
    assert (report.quarantined, report.synced, report.requests) == (2, 1, 1)
    reasons = [e.sync_error or "" for e in store.outbox(state="quarantined")]
    assert reasons[0].startswith("not sent: checkpoint 't-cap-0': state_snapshot is ")
    assert "1048576-byte cap" in reasons[0]
    assert reasons[1] == "not sent: step_type is 41 characters, over the plane's 40-character limit"
    assert plane.ids_on_plane("t-cap") == ["t-cap-2"]
    assert plane.faults.ingest_requests == 1


@pytest.mark.parametrize("where", ["local cap", "plane rejection", "compat refusal"])
def test_a_run_end_refused_for_size_is_followed_by_a_stripped_run_end(
    store: Store, plane: PlaneHandle, where: str
) -> None:
    """The plane still learns the run finished: a state-stripped run end with the same id lands."""
    plane.plane.compat = where == "compat refusal"
    limits = None if where == "local cap" else NO_LOCAL_CAPS
    conn = link(store, plane, background=False, limits=limits)
    store.put(cp("t-end", 0))
    big = {"blob": "q" * 1_100_000, "run_status": "completed"}
    store.put(cp("t-end", 1, node_id="run_end", step_type="run_end", state=big))
    report = drain_once(conn)
    assert report.quarantined == 1
    assert report.synced == 1
    quarantined = store.outbox(state="quarantined")
    assert [e.checkpoint_id for e in quarantined] == ["t-end-1"]
    reason = quarantined[0].sync_error or ""
    expected = {
        "local cap": "not sent: ",
        "plane rejection": "plane rejected: ",
        "compat refusal": "HTTP 413 ",
    }[where]
    assert reason.startswith(expected)
    assert "state_snapshot is" in reason
    with PlaneClient(plane.url, plane.key) as client:
        latest = client.latest("t-end")
        runs = client.runs()
    assert latest is not None
    assert store_ids(latest)[0] == "t-end-1"
    assert latest["step_type"] == "run_end"
    assert latest["state_snapshot"] == {"run_status": "completed"}
    assert was_stripped(latest) == reason
    assert [r["health"] for r in runs["items"] if r["execution_id"] == "t-end"] == ["completed"]


def test_a_stripped_run_end_that_cannot_be_sent_keeps_the_original_pending(
    store: Store, plane: PlaneHandle
) -> None:
    """The original run end is quarantined only once its stand-in landed; until then it stays pending."""
    conn = link(store, plane, background=False, limits=NO_LOCAL_CAPS)
    store.put(
        cp("t-end2", 0, node_id="run_end", step_type="run_end", state={"blob": "q" * 1_100_000})
    )
    plane.faults.faults.extend(
        [None, 503]
    )  # the run end is rejected, then its stand-in meets a 503
    report = drain_once(conn)
    assert report.buffered == 1
    assert states(store) == ["pending"]
    report = drain_once(conn)
    assert report.quarantined == 1
    assert states(store) == ["quarantined"]
    with PlaneClient(plane.url, plane.key) as client:
        latest = client.latest("t-end2")
    assert latest is not None
    assert was_stripped(latest)


def test_released_rows_replay(store: Store, plane: PlaneHandle) -> None:
    """A quarantined row can be released and replayed; once the plane takes it, it is synced."""
    conn = link(store, plane, background=False, limits=NO_LOCAL_CAPS)
    store.put(cp("t-release", 0, step_type="s" * 45))
    drain_once(conn)
    assert states(store) == ["quarantined"]
    plane.plane.caps = type(plane.plane.caps)(step_type_chars=64)
    try:
        assert store.release() == 1
        assert states(store) == ["pending"]
        assert drain_once(conn).synced == 1
    finally:
        plane.plane.caps = type(plane.plane.caps)()
    assert states(store) == ["synced"]
    assert plane.ids_on_plane("t-release") == ["t-release-0"]


# ---------------------------------------------------------------------------- the worker


def test_worker_survives_failing_passes_on_a_capped_backoff() -> None:
    """A pass that raises never kills the thread; the delays double up to the cap, then reset on success."""
    calls: list[int] = []
    done = threading.Event()

    def step() -> DrainReport:
        calls.append(1)
        if len(calls) <= 5:
            raise RuntimeError("the store went away")
        done.set()
        return DrainReport(synced=1)

    with DrainWorker(
        step, backoff=Backoff(initial=0.001, cap=0.004, jitter=0.0), idle_interval=60
    ) as worker:
        worker.wake()
        assert done.wait(10)
        assert worker.running
        assert worker.delays == [0.001, 0.002, 0.004, 0.004, 0.004]
        assert worker.drain_now(timeout=5)
        assert len(calls) == 7
    assert not worker.running


class BrokenTransport(httpx.BaseTransport):
    """Raises what a closed ``httpx.Client`` raises (``RuntimeError``) until ``broken`` is cleared."""

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.broken:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        return self.inner.handle_request(request)


def test_a_broken_http_client_leaves_rows_buffered_and_the_drain_thread_sends_once_it_works(
    store: Store, plane: PlaneHandle
) -> None:
    """A ``RuntimeError`` from the injected client is not a transport error, yet it must not
    escape a pass: the rows stay pending with the error recorded, the thread stays alive and
    retries on its backoff, and sends them as soon as the client works again."""
    transport = BrokenTransport()
    http = httpx.Client(transport=transport, timeout=5)
    conn = link(store, plane, http=http)  # the key check fails the same way: connected anyway
    for n in range(3):
        store.put(cp("t-broken", n))
    wait_for(lambda: transport.calls >= 4, what="retries while the client is broken")
    # A pass records its error after the call raises: wait for the record, not the call.
    wait_for(
        lambda: all("RuntimeError" in (e.last_error or "") for e in store.outbox()),
        what="the error recorded on every pending row",
    )
    worker = conn.worker
    assert worker is not None
    assert worker.running
    assert states(store) == ["pending"] * 3
    assert plane.faults.ingest_requests == 0
    transport.broken = False
    wait_for(all_synced(store), what="the drain once the client works")
    assert worker.running
    assert plane.ids_on_plane("t-broken") == [f"t-broken-{n}" for n in range(3)]
    http.close()


def test_a_pass_that_raises_does_not_stall_the_other_connections_or_kill_the_thread(
    store: Store, plane: PlaneHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """Any exception from one connection's pass is logged with its traceback; the other
    connections of the database still drain, the thread backs off and lives, and the failing
    one sends its rows once it works again."""
    failing = link(store, plane, project_id="p-failing")
    other_key = plane.new_key()
    healthy = link(store, plane, project_id="p-healthy", key=other_key)
    send = failing.client.ingest
    failing.client.ingest = lambda body, ids: 1 / 0  # type: ignore[assignment,method-assign,misc]
    with caplog.at_level(logging.ERROR, logger="durability.replication"):
        store.put(cp("t-failing", 0, project_id="p-failing"))
        store.put(cp("t-healthy", 0, project_id="p-healthy"))
        wait_for(all_synced_of(store, "p-healthy"), what="the healthy connection")
        worker = healthy.worker
        assert worker is not None
        wait_for(lambda: len(worker.delays) >= 2, what="the backoff")
    assert worker.running
    assert states(store, project_id="p-failing") == ["pending"]
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)
    failing.client.ingest = send  # type: ignore[method-assign]
    wait_for(all_synced_of(store, "p-failing"), what="the failing connection, repaired")
    assert worker.running


def all_synced_of(store: Store, project_id: str) -> Callable[[], bool]:
    return lambda: states(store, project_id=project_id) == ["synced"]


def test_backoff_honours_retry_after_within_its_cap() -> None:
    """Retry-After raises a delay but never past the cap; reset starts again from the initial delay."""
    backoff = Backoff(initial=1.0, cap=8.0, jitter=0.0)
    assert [backoff.next() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.next(at_least=5.0) == 5.0
    assert backoff.next(at_least=100.0) == 8.0
