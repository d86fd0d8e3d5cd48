"""Erasure with a live plane: the route, its tombstone, the outbox's erase requests, restore."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from plane_support import PlaneHandle, fast_backoff
from starlette.applications import Starlette

import durability
from durability.errors import ErasedOnPlane, ThreadErased
from durability.model import Checkpoint
from durability.plane import serve_in_thread
from durability.replication import PlaneClient, connect, disconnect, drain_once, erase_thread
from durability.replication.erasure import ERASED, QUEUED, REMAINS
from durability.replication.status import outbox_status
from durability.restore import plan_restore
from durability.runs.inventory import locate_thread
from durability.settings import Settings
from durability.testing import StoreTarget


def _erase_key(plane: PlaneHandle) -> str:
    return plane.storage.create_key(plane.domain, plane.project, can_erase=True).api_key


def _replicate(store: durability.Store, plane: PlaneHandle, key: str, thread: str) -> None:
    """Put three rows of ``thread`` and one of another thread, and drain them to the plane."""
    conn = connect(store, plane.url, key, background=False)
    store.put_many([Checkpoint(thread_id=thread, state={"n": n}) for n in range(3)])
    store.put(Checkpoint(thread_id=thread + "-other"))
    drain_once(conn)
    disconnect(store, timeout=5)


def test_erase_reaches_the_plane_on_every_provider(
    target: StoreTarget, plane: PlaneHandle, tmp_path: Path
) -> None:
    """Store, outbox and plane copies go; the plane refuses the thread's rows and serves nothing."""
    key = _erase_key(plane)
    thread = f"customer-{uuid.uuid4().hex[:8]}"
    with target.open() as store:
        if store.outbox is not None:
            _replicate(store, plane, key, thread)
            assert len(plane.ids_on_plane(thread)) == 3
        else:  # memory keeps no outbox: the plane holds what another store sent
            with durability.open(
                f"sqlite:///{tmp_path / 'other.db'}", settings=Settings()
            ) as other:
                _replicate(other, plane, key, thread)
            store.put(Checkpoint(thread_id=thread))
        with PlaneClient(plane.url, key) as client:
            receipt = erase_thread(store, thread, by="dpo", client=client)
        assert receipt.plane["status"] == ERASED
        assert receipt.plane["projects"][""]["removed"] == 3
        assert plane.ids_on_plane(thread) == []
        assert plane.ids_on_plane(thread + "-other") != []
        assert store.tombstones is not None
        assert store.tombstones.requests() == []
        assert store.history(thread, None) == []
        with pytest.raises(ThreadErased):
            store.put(Checkpoint(thread_id=thread))
        with PlaneClient(plane.url, key) as client:
            with pytest.raises(ThreadErased):
                plan_restore(store, thread, client=client)
            again = erase_thread(store, thread, client=client)
        assert again.already_erased is True
        assert again.plane["projects"][""]["already_erased"] is True


def test_plane_down_until_after_the_erasure(
    tmp_path: Path, plane: PlaneHandle, down_plane: str
) -> None:
    """Unsent rows are dropped, the erase request waits in the outbox, the drain sends it later."""
    key = _erase_key(plane)
    with durability.open(f"sqlite:///{tmp_path / 's.db'}", settings=Settings()) as store:
        _replicate(store, plane, key, "t-down")
        unsent = store.put(Checkpoint(thread_id="t-down", state={"late": True}))
        with PlaneClient(down_plane, key, timeout=2) as gone:
            receipt = erase_thread(store, "t-down", client=gone)
        assert receipt.plane["status"] == QUEUED
        assert receipt.outbox["pending_dropped"] == [unsent.checkpoint_id]
        assert [r.erasures for r in outbox_status(store)] == [1]
        assert store.tombstones is not None
        assert [r.project_id for r in store.tombstones.requests()] == [""]
        assert len(plane.ids_on_plane("t-down")) == 3  # the plane has not heard yet
        with pytest.raises(ThreadErased):
            store.put(Checkpoint(thread_id="t-down"))  # a run still writing is refused
        conn = connect(store, plane.url, key, background=False, backoff=fast_backoff())
        report = drain_once(conn)
        disconnect(store, timeout=5)
        assert report.erased == 1
        assert plane.ids_on_plane("t-down") == []
        assert store.tombstones.requests() == []
        stone = store.tombstones.get("t-down")
        assert stone is not None
        assert '"status": "erased"' in stone.receipt
        assert unsent.checkpoint_id not in plane.ids_on_plane("t-down")


def test_plane_route_rules(plane: PlaneHandle, tmp_path: Path) -> None:
    """Only erase keys may erase; ingest rejects the erased thread per item; reads serve nothing."""
    key = _erase_key(plane)
    with durability.open(f"sqlite:///{tmp_path / 'a.db'}", settings=Settings()) as store:
        _replicate(store, plane, key, "t-gone")
    http = plane.http()
    refused = http.post(
        plane.url + "/public/v1/checkpoints/erase",
        json={"execution_id": "t-gone"},
        headers={"X-API-Key": plane.key},
    )
    assert refused.status_code == 403
    assert "--can-erase" in refused.json()["detail"]
    assert len(plane.ids_on_plane("t-gone")) == 3
    with PlaneClient(plane.url, key) as client:
        assert client.erase("t-gone").body["removed"] == 3
        assert client.erase("t-gone").body["already_erased"] is True
        with pytest.raises(ErasedOnPlane):
            client.latest("t-gone")
    item = {"resource_type": "agent", "node_id": "n", "status": "completed", "state_snapshot": {}}
    batch = {
        "checkpoints": [
            {**item, "checkpoint_id": "c1", "execution_id": "t-gone"},
            {**item, "checkpoint_id": "c2", "execution_id": "t-alive"},
        ]
    }
    answer = http.post(
        plane.url + "/public/v1/checkpoints/ingest", json=batch, headers={"X-API-Key": plane.key}
    )
    assert answer.status_code == 201
    assert answer.json()["ingested"] == 1
    assert [r["execution_id"] for r in answer.json()["rejections"]] == ["t-gone"]
    assert "erased" in answer.json()["rejections"][0]["reason"]
    assert plane.ids_on_plane("t-gone") == []
    # Another machine's store: resume and restore are refused, not served.
    with durability.open(f"sqlite:///{tmp_path / 'b.db'}", settings=Settings()) as fresh:
        conn = connect(fresh, plane.url, plane.key, background=False)
        with pytest.raises(ErasedOnPlane):
            locate_thread(fresh, "t-gone", action="resume the run", connection=conn)
        disconnect(fresh, timeout=5)
        assert fresh.history("t-gone", None) == []


def test_a_plane_without_the_route_keeps_its_copy(tmp_path: Path) -> None:
    """Against a plane with no erase route the receipt says the plane's copy remains."""
    bare = serve_in_thread(Starlette())
    try:
        with durability.open(f"sqlite:///{tmp_path / 'c.db'}", settings=Settings()) as store:
            store.put(Checkpoint(thread_id="t"))
            with PlaneClient(bare.url, "dpk_x", http=httpx.Client(timeout=5)) as client:
                receipt = erase_thread(store, "t", client=client)
            assert receipt.plane["status"] == REMAINS
            assert store.tombstones is not None
            assert store.tombstones.requests() == []
    finally:
        bare.stop()


def test_cli_erases_on_the_plane_it_finds_like_restore(
    tmp_path: Path, plane: PlaneHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`threads erase --yes --json` finds the plane as `restore` does; the receipt shows it gone."""
    import json

    from click.testing import CliRunner

    from durability.cli import cli

    key = _erase_key(plane)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with durability.open(url, settings=Settings()) as store:
        _replicate(store, plane, key, "t-cli")
    monkeypatch.setenv("DURABILITY_PLANE_URL", plane.url)
    monkeypatch.setenv("DURABILITY_PLANE_API_KEY", key)
    done = CliRunner().invoke(cli, ["threads", "erase", url, "t-cli", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.output)
    assert receipt["plane"]["status"] == ERASED
    assert receipt["store"]["checkpoints"] == 3
    assert key not in done.output
    assert plane.ids_on_plane("t-cli") == []


def test_plane_erasure_on_postgres() -> None:
    """A Postgres plane erases under its table lock, idempotently, and refuses the thread after."""
    import sqlalchemy as sa
    from conftest import POSTGRES_URL, postgres_admin

    from durability.plane import PlaneStorage
    from durability.plane.app import Plane

    admin = postgres_admin()
    assert isinstance(admin, sa.Engine)
    schema = f"test_plane_{uuid.uuid4().hex[:10]}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        storage = PlaneStorage(f"{POSTGRES_URL}?options=-csearch_path%3D{schema}")
        tenant = storage.authenticate(
            storage.create_key("d", "p", entitled=True, can_erase=True).api_key
        )
        assert tenant is not None
        assert tenant.can_erase
        item = {"resource_type": "agent", "node_id": "n", "status": "completed"}
        rows = [
            Plane(storage).validate({**item, "checkpoint_id": f"c{n}", "execution_id": "e"})
            for n in range(2)
        ]
        storage.insert(tenant, rows)
        first, second = storage.erase(tenant, "e"), storage.erase(tenant, "e")
        assert (first.removed, first.already_erased) == (2, False)
        assert (second.removed, second.already_erased) == (0, True)
        assert storage.erased(tenant, ["e", "other"]) == {"e"}
        storage.insert(tenant, rows)  # an ingest racing the erase: its rows go in its transaction
        assert storage.count(tenant) == 0
        storage.close()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
