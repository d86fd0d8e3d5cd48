"""What is particular to the Redis store: one slot per thread, whole-thread expiry, the
cross-slot indexes and their repair, delete rounds, the outbox that outlives a thread."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REDIS_URL, drop_redis_prefix, redis_admin
from plane_support import PlaneHandle
from redis.crc import key_slot

import durability
from durability import Checkpoint, PendingWrite
from durability.errors import CheckpointConflict, CheckpointDeleteError, ConfigError
from durability.replication import connect
from durability.settings import Settings, declare_retention
from durability.stores.redis import RedisStore, thread_tag
from durability.stores.redis.scripts import THREAD_KEYS
from durability.testing import HOSTILE_IDS
from durability.testing.suite import write_for

pytestmark = pytest.mark.redis

Opener = Callable[..., RedisStore]


@pytest.fixture
def admin() -> Iterator[Any]:
    """A plain client on the test server (skips, or fails in CI, when it is missing)."""
    client = redis_admin()
    yield client
    client.close()


@pytest.fixture
def open_redis(admin: Any) -> Iterator[Opener]:
    """Open RedisStores under one fresh prefix; every key under it is deleted afterwards."""
    prefix = f"durability-test-{uuid.uuid4().hex[:12]}:"
    stores: list[RedisStore] = []

    def opener(**options: Any) -> RedisStore:
        options.setdefault("settings", Settings())
        store = durability.open(REDIS_URL, prefix=prefix, **options)
        assert isinstance(store, RedisStore)
        stores.append(store)
        return store

    yield opener
    for store in stores:
        store.close()
    drop_redis_prefix(admin, prefix)


def thread_keys(store: RedisStore, thread_id: str) -> list[str]:
    return store.thread_keys(thread_tag(thread_id))


def expiry_ms(admin: Any, keys: list[str]) -> dict[str, int]:
    """PEXPIRETIME of each existing key (absolute ms), read in one round trip."""
    pipe = admin.pipeline(transaction=True)
    for key in keys:
        pipe.pexpiretime(key)
    return {k: v for k, v in zip(keys, pipe.execute(), strict=True) if v != -2}


def server_ms(admin: Any) -> int:
    seconds, micros = admin.time()
    return seconds * 1000 + micros // 1000


def test_every_key_of_a_thread_maps_to_one_slot(open_redis: Opener, admin: Any) -> None:
    """The keys a thread's scripts touch share one cluster slot, even for ids holding { and }."""
    store = open_redis()
    for thread_id in [*HOSTILE_IDS, "{x}", "a}{b", "{}"]:
        keys = thread_keys(store, thread_id)
        assert len(keys) == len(THREAD_KEYS)
        assert len({key_slot(k.encode()) for k in keys}) == 1, thread_id
    globals_ = [
        store.keys.threads,
        store.keys.finished,
        store.keys.parks,
        store.keys.outbox,
        store.keys.quarantine,
        store.keys.connections,
        store.keys.format,
        store.keys.tombstones,
        store.keys.erasure_secret,
        store.keys.erase_requests,
    ]
    assert len({key_slot(k.encode()) for k in globals_}) == 1
    # And nothing a write creates lives outside those keys.
    cp = store.put(Checkpoint(thread_id="{slot}", state={"a": 1}))
    store.put_writes([write_for(cp)])
    store.record_run_start("{slot}", run_id="r", owner="o")
    store.mark_finished("{slot}")
    store.park(Checkpoint(thread_id="{slot}"), deadline=store.clock() + timedelta(days=1))
    made = {k.decode() for k in admin.scan_iter(match=f"{store.prefix}*")}
    assert made <= set(thread_keys(store, "{slot}")) | set(globals_)


def test_every_write_gives_all_keys_one_expiry(open_redis: Opener, admin: Any) -> None:
    """put, put_writes, park and every ledger write re-apply the waiting retention to ALL the thread's keys."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(days=30)))
    keys = thread_keys(store, "t-ttl")
    month = 30 * 86_400_000

    def check(what: str, retention_ms: int) -> int:
        expiries = expiry_ms(admin, keys)
        assert len(expiries) >= 2, what
        assert len(set(expiries.values())) == 1, (
            f"{what}: keys expire at different times {expiries}"
        )
        (at,) = set(expiries.values())
        assert abs(at - (server_ms(admin) + retention_ms)) < 5_000, what
        return at

    cp = store.put(Checkpoint(thread_id="t-ttl", state={"n": 1}))
    first = check("put", month)
    time.sleep(0.01)
    store.put_writes([write_for(cp)])
    assert check("put_writes", month) > first
    store.acquire_lease("t-ttl", "w", timedelta(minutes=5))
    check("lease", month)
    store.park(Checkpoint(thread_id="t-ttl"), deadline=store.clock() + timedelta(days=1))
    check("park", month)
    # A declared waiting retention is the TTL of every key, from that ledger write on.
    store.record_run_start(
        "t-ttl",
        run_id="r2",
        owner="flow",
        retention=declare_retention(store.settings, waiting="1h"),
    )
    check("run start with a declared retention", 3_600_000)
    store.mark_finished("t-ttl")
    check("mark", 3_600_000)
    store.put(Checkpoint(thread_id="t-ttl"))
    check("put after the declaration", 3_600_000)
    store.unmark_finished("t-ttl")
    check("unmark", 3_600_000)


def test_reads_never_extend_an_expiry(open_redis: Opener, admin: Any) -> None:
    """Every read leaves PEXPIRETIME of every key exactly as the last write set it."""
    store = open_redis()
    cp = store.put(Checkpoint(thread_id="t-read", state={"n": 1}))
    store.put_writes([write_for(cp)])
    store.park(Checkpoint(thread_id="t-read"), deadline=store.clock() + timedelta(days=1))
    store.mark_finished("t-read")
    keys = thread_keys(store, "t-read")
    before = expiry_ms(admin, keys)
    time.sleep(0.02)  # any re-applied expiry would now be later
    store.latest("t-read")
    store.get("t-read", cp.checkpoint_id)
    store.history("t-read", None)
    store.writes("t-read", cp.checkpoint_id)
    store.thread("t-read")
    list(store.iter_threads())
    store.get_park("t-read")
    store.parks()
    store.fetch_unsynced()
    store.outbox()
    store.finished_due(store.clock() + timedelta(days=365))
    store.has_thread("t-read")
    assert expiry_ms(admin, keys) == before
    store.put(Checkpoint(thread_id="t-read"))
    assert set(expiry_ms(admin, keys).values()) != set(before.values()), "a write re-applies it"


def test_a_thread_expires_whole(open_redis: Opener, admin: Any) -> None:
    """With a 1 s retention the thread's keys vanish together: no moment shows some without others."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(seconds=1)))
    cp = store.put(Checkpoint(thread_id="t-whole", state={"n": 1}))
    store.put_writes([write_for(cp)])
    store.record_run_start("t-whole", run_id="r", owner="o")
    store.park(
        Checkpoint(thread_id="t-whole"), deadline=store.clock() + timedelta(milliseconds=900)
    )
    keys = [k for k in thread_keys(store, "t-whole") if admin.exists(k)]
    assert len(keys) >= 8
    seen: set[int] = set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pipe = admin.pipeline(transaction=True)  # one instant for all keys
        for key in keys:
            pipe.exists(key)
        present = sum(pipe.execute())
        seen.add(present)
        assert present in (0, len(keys)), (
            f"{present} of {len(keys)} keys left: the thread expired in pieces"
        )
        if present == 0:
            break
        time.sleep(0.02)
    assert seen == {len(keys), 0}
    assert store.latest("t-whole") is None
    assert store.thread("t-whole") is None
    assert [r.thread_id for r in store.iter_threads()] == []
    assert store.parks() == []


def test_unreplicated_rows_outlive_their_thread_when_the_store_replicates(
    open_redis: Opener, admin: Any
) -> None:
    """Replicating: a pending row keeps its outbox entry (whole document) after the thread expires, until marked synced."""
    settings = Settings(waiting_retention=timedelta(seconds=1))
    store = open_redis(settings=settings)
    store.record_connection("p1", "http://plane.example")
    kept = store.put(Checkpoint(thread_id="t-kept", state={"big": "x" * 1000}, project_id="p1"))
    quarantined = store.put(Checkpoint(thread_id="t-kept", state={"n": 2}, project_id="p1"))
    store.mark_quarantined({("t-kept", quarantined.seq or 0): "HTTP 413"})
    deadline = time.monotonic() + 5
    while store.latest("t-kept") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.latest("t-kept") is None
    assert store.thread("t-kept") is None
    again = open_redis(settings=settings)  # another process, after the thread expired
    pending = again.fetch_unsynced()
    assert [c.checkpoint_id for c in pending] == [kept.checkpoint_id]
    assert pending[0] == kept, "the outbox keeps everything needed to send it"
    assert [e.state for e in again.outbox(thread_id="t-kept")] == ["pending", "quarantined"]
    assert again.release() == 1
    again.mark_synced([("t-kept", kept.seq or 0), ("t-kept", quarantined.seq or 0)])
    assert again.fetch_unsynced() == []
    assert again.outbox() == []
    assert not [k for k in thread_keys(again, "t-kept") if admin.exists(k)], (
        "nothing is left behind"
    )


def test_unreplicated_rows_expire_with_their_thread_when_nothing_replicates(
    open_redis: Opener,
) -> None:
    """A store never connected does not replicate (a deployment without a plane keeps its TTL): a
    pending row expires with its thread."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(seconds=1)))
    store.put(Checkpoint(thread_id="t-gone"))
    assert len(store.fetch_unsynced()) == 1
    deadline = time.monotonic() + 5
    while store.fetch_unsynced() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.fetch_unsynced() == []
    assert store.latest("t-gone") is None


def wait_for_expiry(store: RedisStore, thread_id: str) -> None:
    deadline = time.monotonic() + 5
    while store.thread(thread_id) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.thread(thread_id) is None, f"{thread_id} did not expire"


def connect_and_disconnect(store: RedisStore, target: str, api_key: str = "dpk_unused") -> None:
    """A process connects the store, drains once and disconnects cleanly."""
    with httpx.Client(timeout=1.0) as http:
        connect(store, target, api_key, http=http, background=False).close(timeout=5)


def test_pending_rows_outlive_their_thread_after_a_disconnect_and_go_at_the_next_connect(
    open_redis: Opener, admin: Any, down_plane: str, plane: PlaneHandle
) -> None:
    """Rows buffered while connected, and rows written after the disconnect (which re-applies the
    thread's expiry), keep their outbox entries past a 1 s retention; the thread's own keys
    still expire whole; the next connect sends every row and leaves no key behind."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(seconds=1)))
    with httpx.Client(timeout=1.0) as http:
        conn = connect(store, down_plane, "dpk_unused", http=http, background=False)
        store.put(Checkpoint(thread_id="t-buffered", checkpoint_id="while-connected"))
        conn.close(timeout=5)
    store.put(Checkpoint(thread_id="t-buffered", checkpoint_id="after-disconnect"))
    store.put(Checkpoint(thread_id="t-later", checkpoint_id="other-thread"))
    wait_for_expiry(store, "t-buffered")
    wait_for_expiry(store, "t-later")
    left = {k.rpartition(":")[2] for k in thread_keys(store, "t-buffered") if admin.exists(k)}
    assert left == {"od", "os"}, "only the outbox outlives the thread"
    assert [c.checkpoint_id for c in store.fetch_unsynced()] == [
        "while-connected",
        "after-disconnect",
        "other-thread",
    ]
    connect_and_disconnect(store, plane.url, plane.key)
    assert plane.ids_on_plane("t-buffered") == ["while-connected", "after-disconnect"]
    assert plane.ids_on_plane("t-later") == ["other-thread"]
    assert store.outbox() == []
    for thread_id in ("t-buffered", "t-later"):
        assert not [k for k in thread_keys(store, thread_id) if admin.exists(k)]


def test_rows_written_before_the_first_connect_wait_for_the_plane_from_the_connect_on(
    open_redis: Opener, down_plane: str, plane: PlaneHandle
) -> None:
    """A connect (to a plane that is down) keeps the rows a never-connected store already holds,
    even on threads nobody writes again; the next reachable connect sends them."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(seconds=1)))
    store.put(Checkpoint(thread_id="t-early", checkpoint_id="before-any-connect"))
    connect_and_disconnect(store, down_plane)
    wait_for_expiry(store, "t-early")
    assert [c.checkpoint_id for c in store.fetch_unsynced()] == ["before-any-connect"]
    connect_and_disconnect(store, plane.url, plane.key)
    assert plane.ids_on_plane("t-early") == ["before-any-connect"]


def test_forgetting_the_last_connection_gives_the_outbox_back_its_threads_expiry(
    open_redis: Opener, admin: Any
) -> None:
    """Once the store no longer replicates, a live thread's outbox keys expire with the thread and
    the rows of a thread that already expired (kept only for the plane) go at once."""
    settings = Settings(waiting_retention=timedelta(seconds=1))
    store = open_redis(settings=settings)
    store.record_connection("", "http://plane.example")
    store.put(Checkpoint(thread_id="t-orphan"))
    wait_for_expiry(store, "t-orphan")
    store.put(Checkpoint(thread_id="t-live"))
    live = dict(zip(THREAD_KEYS, thread_keys(store, "t-live"), strict=True))
    assert admin.pexpiretime(live["od"]) == -1, "kept while the store replicates"
    store.forget_connection("")
    assert not store.replicates
    thread_expiry = admin.pexpiretime(live["m"])
    assert thread_expiry > 0
    assert admin.pexpiretime(live["od"]) == admin.pexpiretime(live["os"]) == thread_expiry
    assert [e.thread_id for e in store.outbox()] == ["t-live"]
    assert not [k for k in thread_keys(store, "t-orphan") if admin.exists(k)]
    assert admin.zcard(store.keys.outbox) == 1, "the orphan's index entry went too"
    wait_for_expiry(store, "t-live")
    assert store.outbox() == []


def test_seqs_of_pending_rows_are_never_reused_after_expiry(open_redis: Opener) -> None:
    """A thread written again after it expired continues above the seqs its pending rows hold."""
    store = open_redis(settings=Settings(waiting_retention=timedelta(seconds=1)))
    store.record_connection("", "http://plane.example")
    old = [store.put(Checkpoint(thread_id="t-again", node_id=f"old-{n}")) for n in range(3)]
    deadline = time.monotonic() + 5
    while store.latest("t-again") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    new = store.put(Checkpoint(thread_id="t-again", node_id="new"))
    assert (new.seq or 0) > max(c.seq or 0 for c in old)
    assert [c.node_id for c in store.fetch_unsynced()] == ["old-0", "old-1", "old-2", "new"]


def test_a_resent_write_is_recognised_not_duplicated(open_redis: Opener) -> None:
    """A put resent after a lost reply returns the row it stored; a claim resent with its token gets the same park."""
    store = open_redis()
    store.ready()
    row = store.prepare(Checkpoint(thread_id="t-resend", state={"n": 1}), action="put")
    first = store._insert([row], synced=False)
    store._write_args = lambda retry: RedisStore._write_args(store, True)  # type: ignore[method-assign]
    assert store._insert([row], synced=False) == first, "the retry finds its own row"
    other = store.prepare(
        Checkpoint(thread_id="t-resend", checkpoint_id=row.checkpoint_id, state={"n": 2}),
        action="put",
    )
    with pytest.raises(CheckpointConflict):
        store._insert([other], synced=False)
    assert len(store.history("t-resend")) == 1
    del store._write_args
    store.park(Checkpoint(thread_id="t-resend"), deadline=store.clock() + timedelta(days=1))
    tag = thread_tag("t-resend")
    assert store.eval("claim", "claim", tag, ["token-1"]) is not None
    assert store.eval("claim", "claim", tag, ["token-1"]) is not None, "the same claimer, resent"
    assert store.eval("claim", "claim", tag, ["token-2"]) is None, "anyone else loses"


def crash_after_step_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the cross-slot index step fail, as if the process died right after the thread's script.

    A put on one server indexes its rows inside its own script; a cluster's put takes the
    two steps, and that is the path simulated here (``index_in_script`` off).
    """
    monkeypatch.setattr(RedisStore, "index_in_script", False)

    def crash(self: RedisStore, action: str, **_: Any) -> None:
        raise SystemExit(f"killed before {action}")

    monkeypatch.setattr(RedisStore, "index", crash)


def test_reconcile_repairs_a_crash_between_the_two_steps(
    open_redis: Opener, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write whose process died after the thread's script is indexed again when a store starts."""
    store = open_redis()
    store.put(Checkpoint(thread_id="t-before"))
    crash_after_step_one(monkeypatch)
    for step in (
        lambda: store.put(Checkpoint(thread_id="t-crash", state={"n": 1})),
        lambda: store.mark_finished("t-crash"),
        lambda: store.park(
            Checkpoint(thread_id="t-parked"), deadline=store.clock() + timedelta(days=1)
        ),
    ):
        with pytest.raises(SystemExit):
            step()
    monkeypatch.undo()
    assert admin.zcard(store.keys.outbox) == 1, "only t-before is indexed"
    assert admin.zcard(store.keys.threads) == 1
    assert store.latest("t-crash") is not None, "step 1 landed"
    restarted = open_redis()  # a new process: reconciles when first used
    assert {r.thread_id for r in restarted.iter_threads()} == {"t-before", "t-crash", "t-parked"}
    assert {c.thread_id for c in restarted.fetch_unsynced()} == {"t-before", "t-crash", "t-parked"}
    assert [r.thread_id for r in restarted.finished_due(restarted.clock() + timedelta(days=8))] == [
        "t-crash"
    ]
    assert [p.thread_id for p in restarted.parks()] == ["t-parked"]


def test_index_entries_a_thread_no_longer_supports_are_dropped(
    open_redis: Opener, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete that died before its index step leaves entries that readers skip and reconcile removes."""
    store = open_redis()
    store.put(Checkpoint(thread_id="t-dead"))
    store.mark_finished("t-dead")
    store.park(Checkpoint(thread_id="t-dead"), deadline=store.clock() + timedelta(days=1))
    store.put(Checkpoint(thread_id="t-live"))
    crash_after_step_one(monkeypatch)
    with pytest.raises(SystemExit):
        store.delete_thread("t-dead")
    monkeypatch.undo()
    assert admin.zcard(store.keys.finished) == 1
    assert admin.zcard(store.keys.parks) == 1
    restarted = open_redis()
    assert [r.thread_id for r in restarted.iter_threads()] == ["t-live"]
    assert restarted.parks() == []
    assert restarted.finished_due(restarted.clock() + timedelta(days=8)) == []
    assert [c.thread_id for c in restarted.fetch_unsynced()] == ["t-live"]
    for key in (store.keys.finished, store.keys.parks):
        assert admin.zcard(key) == 0
    assert admin.zcard(store.keys.threads) == 1
    assert admin.zcard(store.keys.outbox) == 1


def test_delete_repeats_until_the_thread_is_empty(open_redis: Opener) -> None:
    """A delete in rounds of 10 with a slow concurrent writer ends with the thread empty and counts every row."""
    store = open_redis(delete_batch=10)
    store.put_many([Checkpoint(thread_id="t-rounds", node_id=f"n{n}") for n in range(200)])
    cp = store.latest("t-rounds")
    assert cp is not None
    store.put_writes(
        [
            PendingWrite(
                thread_id="t-rounds",
                checkpoint_id=cp.checkpoint_id,
                task_id=f"t{n}",
                idx=0,
                channel="c",
                value=n,
            )
            for n in range(35)
        ]
    )
    writer = open_redis()
    written = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal written
        while not stop.is_set():
            writer.put(Checkpoint(thread_id="t-rounds"))
            written += 1
            time.sleep(0.002)

    worker = threading.Thread(target=write)
    worker.start()
    time.sleep(0.01)
    try:
        deleted = store.delete_thread("t-rounds")
    finally:
        stop.set()
        worker.join()
    left = len(store.history("t-rounds"))
    assert deleted.writes == 35
    assert deleted.checkpoints + left == 200 + written, "every checkpoint is deleted or still there"
    assert written > 0


def test_delete_fails_when_a_writer_outpaces_it(open_redis: Opener) -> None:
    """The first round, from the second on, that leaves no fewer checkpoints and writes raises CheckpointDeleteError."""
    store = open_redis(delete_batch=5)
    thread_id = "t-flood/" + "x" * 200
    store.put_many([Checkpoint(thread_id=thread_id) for _ in range(500)])
    writer = open_redis()
    stop, flowing = threading.Event(), threading.Event()

    def flood() -> None:
        while not stop.is_set():
            writer.put_many([Checkpoint(thread_id=thread_id) for _ in range(60)])
            flowing.set()

    worker = threading.Thread(target=flood)
    worker.start()
    assert flowing.wait(10)
    try:
        with pytest.raises(CheckpointDeleteError) as info:
            store.delete_thread(thread_id)
    finally:
        stop.set()
        worker.join()
    message = str(info.value)
    assert repr(thread_id[:80]) in message
    assert "checkpoints" in message
    assert "pending writes" in message
    assert "no fewer than round" in message


def test_prefix_isolates_stores_and_is_validated(open_redis: Opener, admin: Any) -> None:
    """Two prefixes on one server never see each other; a prefix with braces or spaces is refused."""
    first = open_redis()
    other_prefix = f"durability-test-{uuid.uuid4().hex[:12]}-other:"
    second = durability.open(f"{REDIS_URL}?prefix={other_prefix}", settings=Settings())
    try:
        first.put(Checkpoint(thread_id="shared-name", state={"who": 1}))
        second.put(Checkpoint(thread_id="shared-name", state={"who": 2}))
        one, two = first.latest("shared-name"), second.latest("shared-name")
        assert one is not None
        assert two is not None
        assert (one.state, two.state) == ({"who": 1}, {"who": 2})
        second.reset()
        assert first.latest("shared-name") is not None
        assert second.latest("shared-name") is None
    finally:
        second.close()
        drop_redis_prefix(admin, other_prefix)
    for bad in ("{tag}:", "has space", ""):
        with pytest.raises(ConfigError, match="prefix"):
            durability.open(REDIS_URL, prefix=bad, settings=Settings())
    with pytest.raises(ConfigError, match="redis://"):
        RedisStore("http://localhost:6379", settings=Settings())


def test_format_generation_has_its_own_key(open_redis: Opener, admin: Any) -> None:
    """The generation is one key under the prefix; a store that lost it but holds checkpoints is refused."""
    store = open_redis()
    store.put(Checkpoint(thread_id="t-gen"))
    assert admin.get(store.keys.format) == b"1"
    admin.delete(store.keys.format)
    with pytest.raises(
        durability.errors.CheckpointStoreFormatError, match="records no format generation"
    ):
        open_redis().latest("t-gen")


def test_a_missing_server_is_reported_clearly() -> None:
    """A server that is not there fails with StoreUnavailable naming the URL, without the password."""
    store = durability.open("redis://:s3cret@127.0.0.1:1/0", settings=Settings())
    with pytest.raises(durability.errors.StoreUnavailable) as info:
        store.latest("t")
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)
    assert isinstance(info.value, ConnectionError)
    assert "s3cret" not in repr(store)


def test_errors_from_the_server_are_mapped(open_redis: Opener, admin: Any) -> None:
    """A key of the wrong type (someone else wrote it) fails as a StoreError naming the action."""
    store = open_redis()
    store.ready()
    admin.set(store.keys.threads, "not a sorted set")
    with pytest.raises(durability.errors.StoreError, match="list threads"):
        store.threads()


@pytest.mark.parametrize("field", ["step", "iteration"])
def test_a_document_whose_number_does_not_fit_in_64_bits_is_refused_when_read(
    open_redis: Opener, field: str, tmp_path: Path
) -> None:
    """A damaged (or hostile) document's step or iteration beyond 64 bits never reaches the
    reader: the read refuses, naming the field, the value, the checkpoint and the fix."""
    import orjson

    from durability.errors import CodecError
    from durability.stores.redis.documents import HEADER_FIELDS

    store = open_redis()
    cp = store.put(Checkpoint(thread_id="damaged", step=1))
    key = thread_keys(store, "damaged")
    (docs,) = [k for k in key if k.endswith(":c")]
    ((seq, doc),) = store.client.hgetall(docs).items()
    head, body = doc.split(b"\n", 1)
    fields = orjson.loads(head)
    fields[HEADER_FIELDS.index(field)] = 2**64 - 1
    store.client.hset(docs, seq, orjson.dumps(fields) + b"\n" + body)
    destination = tmp_path / "copy.db"
    with pytest.raises(CodecError, match=field):  # copied as stored rows: refused the same
        durability.copy(store, f"sqlite:///{destination}")
    with durability.open(f"sqlite:///{destination}") as copied:
        assert copied.thread("damaged") is None
    for read in (lambda: store.get("damaged", cp.checkpoint_id), lambda: store.history("damaged")):
        with pytest.raises(CodecError) as refused:
            read()
        message = str(refused.value)
        assert field in message
        assert str(2**64 - 1) in message
        assert cp.checkpoint_id in message
        assert "restore it from a copy" in message


def test_the_oldest_entries_of_a_state_match_the_whole_listing(open_redis: Opener) -> None:
    """`outbox.entries(state=…, limit=N)` reads the state's index window by window; its rows
    are the first N of the whole listing, ties in write time across windows included."""
    from durability.clock import FrozenClock

    clock = FrozenClock()
    store = open_redis(clock=clock)
    for n in range(260):
        if n % 7 == 0:
            clock.advance(timedelta(seconds=1))  # seven rows share each write time
        store.put(Checkpoint(thread_id=f"t{n % 90:02d}", state={"n": n}))
    refused = [e for e in store.outbox.entries(state="pending") if e.seq % 3 == 0]
    store.outbox.mark_quarantined({(e.thread_id, e.seq): "too large" for e in refused})
    for state in ("pending", "quarantined"):
        whole = store.outbox.entries(state=state)
        assert len(whole) >= 80, "past a window of 100 for pending, under it for quarantined"
        for limit in (1, 7, 20, 99, 100, 101, len(whole), len(whole) + 5):
            assert store.outbox.entries(state=state, limit=limit) == whole[:limit], (state, limit)
