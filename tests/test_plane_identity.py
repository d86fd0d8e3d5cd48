"""Two threads may hold the same checkpoint id: nothing is lost to it, against this plane (which
keys rows per execution and says so) and against one idempotent by checkpoint id alone (this
plane's compat mode, as a fastaiagent plane is), in one batch or across batches; and an existing
plane database is rekeyed by a versioned migration."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from conftest import POSTGRES_URL, postgres_admin
from plane_support import NO_LOCAL_CAPS, PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.plane import PlaneStorage
from durability.plane.migrations import applied_migrations
from durability.replication import PlaneClient, connect, disconnect, drain_once
from durability.replication.connection import Connection
from durability.replication.wire import WIRE_ID_PREFIX, store_ids, wire_checkpoint_id
from durability.restore import apply_restore, plan_restore
from durability.settings import Settings
from durability.stores.base import Store

MODES = ["default", "compat"]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    with durability.open(f"sqlite:///{tmp_path / 'ids.db'}", settings=Settings()) as store:
        yield store
    disconnect(store, timeout=5)


def thread_rows(thread: str) -> list[Checkpoint]:
    """A thread whose ids another thread shares: step-0 then step-1 (its child) at the root, and
    a step-1 in a subgraph namespace too."""
    return [
        Checkpoint(thread_id=thread, checkpoint_id="step-0", state={"thread": thread, "n": 0}),
        Checkpoint(
            thread_id=thread,
            checkpoint_id="step-1",
            parent_checkpoint_id="step-0",
            state={"thread": thread, "n": 1},
        ),
        Checkpoint(
            thread_id=thread,
            checkpoint_id="step-1",
            namespace="sub",
            state={"thread": thread, "n": 2},
        ),
    ]


def restored(plane: PlaneHandle, thread: str, tmp_path: Path) -> list[Checkpoint]:
    """The thread as a restore into a fresh store writes it (every namespace, write order)."""
    with (
        durability.open(f"sqlite:///{tmp_path / f'fresh-{uuid.uuid4().hex}.db'}") as fresh,
        PlaneClient(plane.url, plane.key) as client,
    ):
        apply_restore(fresh, plan_restore(fresh, thread, client=client))
        return fresh.history(thread, None)


def connect_in_mode(store: Store, plane: PlaneHandle, mode: str, **options: Any) -> Connection:
    """A foreground connection of ``store`` to the test plane, the plane set to ``mode``
    (``compat``: it refuses whole batches, as older planes do)."""
    plane.plane.compat = mode == "compat"
    return connect(store, plane.url, plane.key, background=False, http=plane.http(), **options)


def shape(rows: list[Checkpoint]) -> list[tuple[Any, ...]]:
    return sorted(
        (c.namespace, c.checkpoint_id, c.parent_checkpoint_id, orjson.dumps(c.state)) for c in rows
    )


@pytest.mark.parametrize("batches", ["one batch", "two batches"])
@pytest.mark.parametrize("mode", MODES)
def test_two_threads_sharing_checkpoint_ids_both_replicate_and_restore(
    sqlite_store: Store, plane: PlaneHandle, tmp_path: Path, mode: str, batches: str
) -> None:
    """Every row of both threads is stored on the plane (none dropped, none quarantined), and a
    restore gives each thread back whole: ids, parents, namespaces and states."""
    conn = connect_in_mode(sqlite_store, plane, mode, backoff=fast_backoff())
    assert conn.own_ids == (mode == "default")
    written = {}
    for thread in ("order-a", "order-b"):
        written[thread] = sqlite_store.put_many(thread_rows(thread))
        if batches == "two batches":
            drain_once(conn)
    drain_once(conn)
    assert [e.state for e in sqlite_store.outbox()] == ["synced"] * 6
    for thread in ("order-a", "order-b"):
        assert sorted(plane.ids_on_plane(thread)) == ["step-0", "step-1", "step-1"]
        assert shape(restored(plane, thread, tmp_path)) == shape(written[thread])


def test_the_wire_ids_a_plane_without_execution_keys_gets(
    sqlite_store: Store, plane: PlaneHandle
) -> None:
    """Compat mode announces nothing, so the client sends derived, prefixed ids, the parent
    derived the same way (history still links on the plane), the originals in the extension."""
    plane.plane.compat = True
    conn = connect(sqlite_store, plane.url, plane.key, background=False, http=plane.http())
    sqlite_store.put_many(thread_rows("order-c"))
    drain_once(conn)
    with PlaneClient(plane.url, plane.key) as client:
        items = list(client.iter_history("order-c") or [])
    by_ns = {(i["metadata"]["durability"]["namespace"], store_ids(i)[0]): i for i in items}
    child = by_ns[("", "step-1")]
    assert child["checkpoint_id"] == wire_checkpoint_id("order-c", "", "step-1")
    assert child["checkpoint_id"].startswith(WIRE_ID_PREFIX)
    assert len(child["checkpoint_id"]) == 43
    assert child["parent_checkpoint_id"] == by_ns[("", "step-0")]["checkpoint_id"]
    assert store_ids(child) == ("step-1", "step-0")
    assert by_ns[("sub", "step-1")]["checkpoint_id"] != child["checkpoint_id"]


def test_a_resent_row_is_stored_once_even_with_its_agent_id_resolved_since(
    plane: PlaneHandle,
) -> None:
    """Ingest stays idempotent: the same row re-sent (its agent id now the plane's UUID) is not
    stored again and is not a conflict; the first write wins."""
    item = {
        "checkpoint_id": "c1",
        "execution_id": "e-resend",
        "resource_type": "agent",
        "agent_id": "helper",
        "state_snapshot": {"v": 1},
        "metadata": {"durability": {"namespace": ""}},
    }
    resent = {**item, "agent_id": str(uuid.uuid4()), "state_snapshot": {"v": 2}}
    for compat in (False, True):
        plane.plane.compat = compat
        plane.new_key()
        first = plane.storage.insert(plane.tenant(), [plane.plane.validate(item)])
        again = plane.storage.insert(
            plane.tenant(), [plane.plane.validate(resent), plane.plane.validate(item)]
        )
        assert (first, again) == ((1, []), (0, []))
        latest = plane.storage.latest(plane.tenant(), "e-resend")
        assert latest is not None
        assert (latest["agent_id"], latest["state_snapshot"]) == ("helper", {"v": 1})


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_duplicate_names_both_ids_and_quarantines_exactly_that_row(
    sqlite_store: Store, plane: PlaneHandle, mode: str
) -> None:
    """Two rows of one batch share a checkpoint id; the plane refuses one of them (here for its
    size): the refusal names its checkpoint id and execution id, so exactly that row is
    quarantined and the other is synced (a refusal by checkpoint id alone took both)."""
    conn = connect_in_mode(sqlite_store, plane, mode, limits=NO_LOCAL_CAPS)
    sqlite_store.put(
        Checkpoint(thread_id="big", checkpoint_id="step-1", state={"x": "y" * 1_100_000})
    )
    sqlite_store.put(Checkpoint(thread_id="small", checkpoint_id="step-1", state={"x": "y"}))
    report = drain_once(conn)
    assert (report.synced, report.quarantined) == (1, 1)
    [refused] = sqlite_store.outbox(state="quarantined")
    assert (refused.thread_id, refused.checkpoint_id) == ("big", "step-1")
    assert "state_snapshot is" in (refused.sync_error or "")
    assert plane.ids_on_plane("small") == ["step-1"]
    assert plane.ids_on_plane("big") == []


def test_compat_refusal_of_a_taken_id_names_the_checkpoint_and_the_execution(
    plane: PlaneHandle,
) -> None:
    """A plane keeping ids unique refuses the second execution's id with 409 naming both, in the
    same batch as the first or in a later one; nothing is dropped silently."""
    import httpx

    plane.plane.compat = True

    def post(*executions: str) -> httpx.Response:
        items = [{"checkpoint_id": "dup", "execution_id": e} for e in executions]
        return httpx.post(
            plane.url + "/public/v1/checkpoints/ingest",
            content=orjson.dumps({"checkpoints": items}),
            headers={"X-API-Key": plane.key},
        )

    for answer in (post("e-1", "e-2"), post("e-2")):
        assert answer.status_code == 409
        body = answer.json()
        assert (body["checkpoint_id"], body["execution_id"]) == ("dup", "e-2")
        assert "already stored for execution 'e-1'" in body["detail"]
    assert plane.ids_on_plane("e-2") == []
    assert plane.ids_on_plane("e-1") == ["dup"]


# ---------------------------------------------------------------------------- the migration

#: The plane's checkpoint table as generation 1 made it: keyed by (tenant, checkpoint id).
LEGACY = sa.MetaData()
LEGACY_CHECKPOINTS = sa.Table(
    "plane_checkpoints",
    LEGACY,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("ckey", sa.String(64), nullable=False, unique=True),
    sa.Column("ekey", sa.String(64), nullable=False),
    sa.Column("checkpoint_id", sa.Text, nullable=False),
    sa.Column("execution_id", sa.Text, nullable=False),
    sa.Column("resource_type", sa.String(16), nullable=False),
    sa.Column("agent_id", sa.Text),
    sa.Column("chain_id", sa.Text),
    sa.Column("node_id", sa.Text, nullable=False),
    sa.Column("step_index", sa.BigInteger),
    sa.Column("step_type", sa.Text),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("parent_checkpoint_id", sa.Text),
    sa.Column("state_snapshot", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text),
    sa.Column("order_at", sa.BigInteger, nullable=False),
    sa.Column("sequence", sa.BigInteger),
    sa.Column("received_at", sa.BigInteger, nullable=False),
)


def legacy_plane(url: str) -> tuple[str, str]:
    """A generation-1 plane database at ``url`` holding two rows of one tenant (no migrations
    table, the old keys); returns a key of that tenant and the row's tenant hash."""
    import hashlib

    storage = PlaneStorage(url)  # today's tables, then taken back to generation 1
    key = storage.create_key("legacy-dom", "legacy-proj", entitled=True)
    tenant = storage.authenticate(key.api_key)
    assert tenant is not None
    storage.close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE plane_checkpoints")
        conn.exec_driver_sql("DROP TABLE plane_migrations")
        LEGACY.create_all(conn)
        for n, (execution, ns) in enumerate([("old-a", ""), ("old-b", "sub")]):
            old_key = hashlib.sha256(f"{tenant.key}\x00step-1".encode()).hexdigest()
            conn.execute(
                LEGACY_CHECKPOINTS.insert().values(
                    tenant=tenant.key,
                    ckey=old_key if n == 0 else old_key[::-1],
                    ekey=hashlib.sha256(f"{tenant.key}\x00{execution}".encode()).hexdigest(),
                    checkpoint_id="step-1",
                    execution_id=execution,
                    resource_type="chain",
                    node_id="n",
                    status="completed",
                    state_snapshot="{}",
                    metadata=orjson.dumps({"durability": {"namespace": ns}}).decode(),
                    order_at=n,
                    received_at=n,
                )
            )
    engine.dispose()
    return key.api_key, tenant.key


def check_migration(url: str) -> None:
    api_key, _ = legacy_plane(url)
    storage = PlaneStorage(url)
    try:
        assert applied_migrations(storage.engine) == [1, 2, 3]
        tenant = storage.authenticate(api_key)
        assert tenant is not None
        from durability.plane.app import Plane

        plane = Plane(storage)
        again = [
            plane.validate(
                {
                    "checkpoint_id": "step-1",
                    "execution_id": e,
                    "metadata": {"durability": {"namespace": ns}},
                }
            )
            for e, ns in [("old-a", ""), ("old-b", "sub")]
        ]
        assert storage.insert(tenant, again) == (0, []), "the migrated rows are found by new keys"
        fresh = plane.validate({"checkpoint_id": "step-1", "execution_id": "new-c"})
        assert storage.insert(tenant, [fresh]) == (1, [])
        assert storage.count(tenant) == 3
    finally:
        storage.close()
    reopened = PlaneStorage(url)  # recorded: nothing runs twice
    assert applied_migrations(reopened.engine) == [1, 2, 3]
    reopened.close()


def test_a_generation_1_sqlite_plane_is_migrated(tmp_path: Path) -> None:
    check_migration(f"sqlite:///{tmp_path / 'legacy-plane.db'}")


@pytest.mark.postgres
def test_a_generation_1_postgres_plane_is_migrated() -> None:
    engine: Any = postgres_admin()
    schema = f"plane_mig_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        base = POSTGRES_URL.split("?")[0]
        check_migration(f"{base}?options=-csearch_path%3D{schema}")
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        engine.dispose()
