"""The Redis store on a real 3-node Redis Cluster, started on spare loopback ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import need_service

import durability
from durability import Checkpoint
from durability.clock import FrozenClock
from durability.settings import Settings
from durability.stores.redis import RedisStore, thread_tag
from durability.stores.redis.scripts import THREAD_KEYS
from durability.testing import CHECKS, HOSTILE_IDS, StoreTarget, not_applicable
from durability.testing.suite import write_for
from tests.plane_support import PlaneHandle

pytestmark = pytest.mark.redis

#: Checks that start other processes or write 1,000 threads one script at a time are run on
#: the single server; everything else runs here too.
SKIP = {
    "park_claim_across_processes",
    "two_processes_write_one_thread",
    "thousand_threads_listed_in_pages",
}


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback whose cluster bus port (port + 10000) is free too."""
    found: list[int] = []
    for port in range(21_000, 30_000, 7):
        if len(found) == count:
            break
        sockets = []
        try:
            for p in (port, port + 10_000):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                sockets.append(s)
            found.append(port)
        except OSError:
            pass
        finally:
            for s in sockets:
                s.close()
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-primary Redis Cluster on loopback; yields the URL of one node."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        need_service("redis-server", "redis-server and redis-cli are needed to start a cluster")
    assert server is not None
    assert cli is not None
    ports = _free_ports(3)
    root: Path = tmp_path_factory.mktemp("cluster")
    for port in ports:
        node = root / str(port)
        node.mkdir()
        subprocess.run(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node / "nodes.conf"),
                "--dir",
                str(node),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--logfile",
                str(node / "log"),
            ],
            check=True,
        )
    try:
        for port in ports:
            _wait(
                lambda p=port: (
                    subprocess.run(
                        [cli, "-p", str(p), "ping"], capture_output=True, text=True
                    ).stdout.strip()
                    == "PONG"
                )
            )
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
        )
        for port in ports:
            _wait(
                lambda p=port: (
                    "cluster_state:ok"
                    in subprocess.run(
                        [cli, "-p", str(p), "cluster", "info"], capture_output=True, text=True
                    ).stdout
                )
            )
        yield f"redis://127.0.0.1:{ports[0]}/0?cluster=true"
    finally:
        for port in ports:
            subprocess.run([cli, "-p", str(port), "shutdown", "nosave"], capture_output=True)


def _wait(ready: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the cluster did not come up"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "check",
    [c for c in CHECKS if c.__name__.removeprefix("check_") not in SKIP],
    ids=lambda c: c.__name__.removeprefix("check_"),
)
def test_conformance_on_a_cluster(check: object, cluster: str) -> None:
    """The shared suite passes against a real Redis Cluster (keys of one thread, one slot)."""
    target = StoreTarget(f"{cluster}&prefix=durability-test-{uuid.uuid4().hex[:12]}:")
    reason = not_applicable(check, target)  # type: ignore[arg-type]
    if reason is not None:
        pytest.skip(reason)
    check(target)  # type: ignore[operator]


def test_the_cluster_puts_every_key_of_a_thread_in_one_slot(cluster: str) -> None:
    """CLUSTER KEYSLOT, asked of the servers, gives every key a thread's scripts touch the same slot."""
    store = durability.open(
        f"{cluster}&prefix=durability-test-{uuid.uuid4().hex[:12]}:", settings=Settings()
    )
    assert isinstance(store, RedisStore)
    assert store.cluster
    try:
        for thread_id in HOSTILE_IDS[:5]:
            cp = store.put(Checkpoint(thread_id=thread_id, state={"n": 1}))
            store.put_writes([write_for(cp)])
            store.park(Checkpoint(thread_id=thread_id), deadline=store.clock() + timedelta(days=1))
            keys = store.thread_keys(thread_tag(thread_id))
            assert len(keys) == len(THREAD_KEYS)
            slots = {store.client.cluster_keyslot(k) for k in keys}
            assert len(slots) == 1, (thread_id, slots)
        assert (
            len(
                {
                    store.client.cluster_keyslot(k)
                    for k in (store.keys.threads, store.keys.outbox, store.keys.format)
                }
            )
            == 1
        )
        assert {r.thread_id for r in store.iter_threads()} == set(HOSTILE_IDS[:5])
        store.reset()
    finally:
        store.close()


def _cluster_target(cluster: str) -> StoreTarget:
    return StoreTarget(f"{cluster}&prefix=durability-test-{uuid.uuid4().hex[:12]}:")


def test_the_doctor_finds_and_repairs_on_a_cluster(cluster: str) -> None:
    """The doctor's breaks and repairs (issue 20), on a cluster: each repair script runs in its
    thread's slot, the index changes in the ``{g}`` slot."""
    from tests import test_doctor as doctor

    for check in (
        doctor.test_every_break_is_found_and_named,
        doctor.test_fix_repairs_the_safe_ones_and_deletes_only_with_yes,
        doctor.test_the_outbox_repairs_recheck_each_record_as_they_act,
    ):
        with _cluster_target(cluster).open(
            settings=doctor.SETTINGS, clock=FrozenClock(doctor.T0)
        ) as store:
            check(store)
            store.reset()


def test_the_doctor_requeues_what_the_plane_lacks_on_a_cluster(
    cluster: str, plane: PlaneHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica short of rows, named and re-queued on a cluster, against a real plane."""
    from tests import test_doctor as doctor

    doctor.test_a_replica_short_of_rows_the_store_marks_synced_is_named(
        _cluster_target(cluster), plane, monkeypatch
    )
    doctor.test_requeue_races_a_live_drain_and_a_writer(_cluster_target(cluster), plane)
