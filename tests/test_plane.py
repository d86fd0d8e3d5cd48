"""The reference plane over HTTP: tenants, keys, entitlement, ingest rules, reads, and its CLI."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from click.testing import CliRunner
from conftest import POSTGRES_URL
from plane_support import PlaneHandle

import durability
from durability import Checkpoint
from durability.cli import cli
from durability.plane import PlaneStorage
from durability.replication import (
    PlaneClient,
    checkpoint_to_wire,
    connect,
    disconnect,
    path_segment,
)
from durability.settings import Settings

INGEST = "/public/v1/checkpoints/ingest"


def item(checkpoint_id: str, execution_id: str = "e-1", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "execution_id": execution_id,
        "resource_type": "chain",
        "agent_id": None,
        "chain_id": "etl",
        "node_id": "fetch",
        "step_index": 0,
        "step_type": "node",
        "status": "completed",
        "parent_checkpoint_id": None,
        "state_snapshot": {"k": checkpoint_id},
        "metadata": {"chain_name": "etl"},
        "created_at": "2026-01-05T09:00:00+00:00",
    }
    base.update(fields)
    return base


def post(plane: PlaneHandle, items: list[dict[str, Any]], key: str | None = None) -> httpx.Response:
    return httpx.post(
        plane.url + INGEST,
        content=orjson.dumps({"checkpoints": items}),
        headers={
            "X-API-Key": key if key is not None else plane.key,
            "Content-Type": "application/json",
        },
    )


def get(plane: PlaneHandle, path: str, key: str | None = None, **params: Any) -> httpx.Response:
    return httpx.get(
        plane.url + path,
        params=params,
        headers={"X-API-Key": key if key is not None else plane.key},
    )


def test_keys_are_stored_hashed_and_scoped(plane: PlaneHandle, tmp_path: Path) -> None:
    """A new key is shown once; the database holds only its SHA-256; it names its domain and project."""
    storage = PlaneStorage(f"sqlite:///{tmp_path / 'keys.db'}")
    made = storage.create_key("acme", "shop", entitled=True)
    storage.close()
    dump = "\n".join(sqlite3.connect(tmp_path / "keys.db").iterdump())
    assert made.api_key not in dump
    assert made.api_key.startswith("dpk_")
    check = get(plane, "/public/v1/auth/check").json()
    assert (check["domain_id"], check["project_id"]) == (plane.domain, plane.project)
    assert check["entitlements"] == {"connected_state_plane": True}
    assert check["limits"] == {
        "state_bytes": 1_048_576,
        "step_type_chars": 40,
        "agent_id_chars": 255,
        "body_bytes": 64 * 1024 * 1024,
    }
    assert get(plane, "/public/v1/auth/check", key="dpk_wrong").status_code == 401
    assert get(plane, "/public/v1/auth/check", key="").status_code == 401


def test_ingest_needs_the_entitlement(plane: PlaneHandle) -> None:
    """Without connected_state_plane the door answers 403; the reads of the tenant still work."""
    key = plane.new_key(entitled=False)
    refused = post(plane, [item("c1")], key)
    assert refused.status_code == 403
    assert "connected_state_plane" in refused.json()["detail"]
    plane.storage.set_entitlement(plane.domain, True)
    assert post(plane, [item("c1")], key).status_code == 201
    plane.storage.set_entitlement(plane.domain, False)
    assert get(plane, "/public/v1/checkpoints/e-1/latest", key).status_code == 200


def test_ingest_is_insert_only_and_idempotent(plane: PlaneHandle) -> None:
    """A re-sent row is not stored again (ingested 0) and never updates; the same id in another
    execution is another row (rows are keyed per execution, as the stores key them)."""
    first = post(plane, [item("c1"), item("c2"), item("c1")])
    assert first.status_code == 201
    assert first.json() == {
        "ingested": 2,
        "rejected": 0,
        "rejections": [],
    }
    again = post(plane, [item("c1", state_snapshot={"changed": True})]).json()
    assert again["ingested"] == 0
    assert again["rejected"] == 0
    assert get(plane, "/public/v1/checkpoints/e-1/latest").json()["state_snapshot"] in (
        {"k": "c1"},
        {"k": "c2"},
    )
    other = post(plane, [item("c1", execution_id="e-other")]).json()
    assert other == {"ingested": 1, "rejected": 0, "rejections": []}
    assert plane.ids_on_plane("e-other") == ["c1"]


def test_caps_are_per_item_rejections(plane: PlaneHandle) -> None:
    """Over the 1 MiB state cap or a column cap: refused one by one with the reason; the rest are stored."""
    body = post(
        plane,
        [
            item("ok"),
            item("big", state_snapshot={"x": "y" * 1_048_600}),
            item("long", step_type="s" * 41),
            item("weird", status="paused"),
        ],
    ).json()
    assert body["ingested"] == 1
    assert body["rejected"] == 3
    reasons = {r["checkpoint_id"]: r["reason"] for r in body["rejections"]}
    assert reasons["big"].startswith("state_snapshot is 1048")
    assert reasons["big"].endswith("over the 1048576-byte cap")
    assert reasons["long"] == "step_type is 41 characters, over the 40-character limit"
    assert "status 'paused'" in reasons["weird"]
    assert post(plane, []).json() == {"ingested": 0, "rejected": 0, "rejections": []}
    assert post(plane, [{"checkpoint_id": ""}]).status_code == 422
    bad_json = httpx.post(plane.url + INGEST, content=b"{nope", headers={"X-API-Key": plane.key})
    assert bad_json.status_code == 400


def test_compat_mode_refuses_the_whole_batch_naming_the_offender(plane: PlaneHandle) -> None:
    """As older planes do: 413 for size, 422 for a column cap, nothing stored, the offender named."""
    plane.plane.compat = True
    big = post(plane, [item("a"), item("big", state_snapshot={"x": "y" * 1_100_000})])
    assert big.status_code == 413
    assert big.json()["checkpoint_id"] == "big"
    assert big.json()["execution_id"] == "e-1"
    assert big.json()["detail"].startswith("checkpoint big of execution e-1: state_snapshot is ")
    long = post(plane, [item("a"), item("long", step_type="s" * 41)])
    assert long.status_code == 422
    assert long.json()["checkpoint_id"] == "long"
    assert get(plane, "/public/v1/checkpoints/e-1/latest").status_code == 404


def test_latest_is_by_client_time_then_arrival(plane: PlaneHandle) -> None:
    """Latest: the last row by the client's created_at, ties broken by arrival order."""
    post(plane, [item("late", created_at="2026-01-05T10:00:00+00:00")])
    post(
        plane, [item("early", created_at="2026-01-05T08:00:00Z")]
    )  # arrives later, written earlier
    assert get(plane, "/public/v1/checkpoints/e-1/latest").json()["checkpoint_id"] == "late"
    post(plane, [item("tie", created_at="2026-01-05T10:00:00+00:00")])
    assert get(plane, "/public/v1/checkpoints/e-1/latest").json()["checkpoint_id"] == "tie"
    history = get(plane, "/public/v1/checkpoints/e-1").json()
    assert [i["checkpoint_id"] for i in history["items"]] == ["early", "late", "tie"]


def test_history_pages(plane: PlaneHandle) -> None:
    """History is served oldest first in pages; following the cursor yields every row once."""
    post(plane, [item(f"c{n:02}", created_at=f"2026-01-05T09:00:{n:02}+00:00") for n in range(25)])
    with PlaneClient(plane.url, plane.key) as client:
        first = client.history("e-1", limit=10)
        assert first is not None
        assert len(first.items) == 10
        assert first.cursor is not None
        everything = client.iter_history("e-1", page_size=7)
        assert everything is not None
        assert [i["checkpoint_id"] for i in everything] == [f"c{n:02}" for n in range(25)]
    assert get(plane, "/public/v1/checkpoints/e-1", cursor="garbage").status_code == 422
    assert get(plane, "/public/v1/checkpoints/e-1", limit="0").status_code == 422


def test_run_health(plane: PlaneHandle) -> None:
    """Run health per execution: 'completed' only with a run end; otherwise 'last step done'; paged."""
    post(
        plane,
        [
            item("a1", "run-a", created_at="2026-01-05T09:00:00+00:00"),
            item(
                "a2",
                "run-a",
                step_type="run_end",
                node_id="run_end",
                created_at="2026-01-05T09:00:01+00:00",
            ),
            item("b1", "run-b"),
            item("c1", "run-c", status="interrupted", step_type="hitl_pause"),
            item("d1", "run-d", status="failed", step_type="run_end"),
        ],
    )
    with PlaneClient(plane.url, plane.key) as client:
        first = client.runs(limit=3)
        rest = client.runs(limit=3, cursor=first["next_cursor"])
    runs = {r["execution_id"]: r for r in first["items"] + rest["items"]}
    assert rest["next_cursor"] is None
    assert len(runs) == 4
    assert runs["run-a"]["health"] == "completed"
    assert runs["run-a"]["checkpoints"] == 2
    assert runs["run-a"]["node_id"] == "run_end"
    assert runs["run-b"]["health"] == "last step done"
    assert runs["run-c"]["health"] == "interrupted"
    assert runs["run-d"]["health"] == "failed"


def test_one_tenant_never_reads_another(plane: PlaneHandle) -> None:
    """The same execution and checkpoint ids in two tenants stay apart in every read."""
    key_a = plane.key
    key_b = plane.new_key()
    post(plane, [item("same", "shared-exec", state_snapshot={"owner": "a"})], key_a)
    post(plane, [item("same", "shared-exec", state_snapshot={"owner": "b"})], key_b)
    for key, owner in ((key_a, "a"), (key_b, "b")):
        assert get(plane, "/public/v1/checkpoints/shared-exec/latest", key).json()[
            "state_snapshot"
        ] == {"owner": owner}
        history = get(plane, "/public/v1/checkpoints/shared-exec", key).json()["items"]
        assert [i["state_snapshot"]["owner"] for i in history] == [owner]
        assert [r["execution_id"] for r in get(plane, "/public/v1/runs", key).json()["items"]] == [
            "shared-exec"
        ]
    key_c = plane.new_key()
    assert get(plane, "/public/v1/checkpoints/shared-exec/latest", key_c).status_code == 404
    assert get(plane, "/public/v1/runs", key_c).json()["items"] == []


def test_encoded_ids_address_exactly_one_execution(plane: PlaneHandle) -> None:
    """An execution id holding / ? # or .. is one path segment: it never reaches another execution."""
    post(plane, [item("x1", "a/b"), item("x2", "a"), item("x3", "..")])
    assert (
        get(plane, f"/public/v1/checkpoints/{path_segment('a/b')}/latest").json()["checkpoint_id"]
        == "x1"
    )
    assert (
        get(plane, f"/public/v1/checkpoints/{path_segment('a')}/latest").json()["checkpoint_id"]
        == "x2"
    )
    assert (
        get(plane, f"/public/v1/checkpoints/{path_segment('..')}/latest").json()["checkpoint_id"]
        == "x3"
    )
    assert get(plane, "/public/v1/checkpoints/a/b/latest").status_code == 404


def test_connect_time_endpoints_the_sdk_calls(plane: PlaneHandle) -> None:
    """policy, governance enroll and agent registration answer as the fastaiagent SDK expects."""
    headers = {"X-API-Key": plane.key}
    policy = httpx.get(plane.url + "/public/v1/policy", headers=headers).json()
    assert policy["guardrail_rules"] == []
    assert policy["approval_policies"] == []
    enroll = httpx.post(
        plane.url + "/public/v1/governance/enroll", json={"instance_id": "i-1"}, headers=headers
    )
    assert enroll.status_code == 200
    assert enroll.json()["instance_id"] == "i-1"
    first = httpx.post(
        plane.url + "/public/v1/sdk/agents", json={"name": "helper"}, headers=headers
    ).json()
    second = httpx.post(
        plane.url + "/public/v1/sdk/agents", json={"name": "helper", "x": 1}, headers=headers
    ).json()
    assert first["id"] == second["id"]
    assert (first["version"], second["version"]) == (1, 2)
    assert (
        httpx.get(plane.url + "/public/v1/policy", headers={"X-API-Key": "nope"}).status_code == 401
    )


def test_postgres_storage(plane: PlaneHandle) -> None:
    """The plane runs on Postgres too: keys, ingest, latest and run health over one server database."""
    import uuid

    import sqlalchemy as sa

    url = POSTGRES_URL
    schema = f"plane_{uuid.uuid4().hex[:12]}"
    try:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    except Exception as exc:  # pragma: no cover - depends on the server
        from conftest import need_service

        need_service("PostgreSQL", str(exc)[:200])
    try:
        storage = PlaneStorage(f"{url}?options=-csearch_path%3D{schema}")
        made = storage.create_key("pg-dom", "pg-proj", entitled=True)
        tenant = storage.authenticate(made.api_key)
        assert tenant is not None
        assert tenant.entitled
        from durability.plane.app import Plane

        rows = [Plane(storage).validate(item(f"p{n}", "pg-run")) for n in range(3)]
        assert storage.insert(tenant, rows) == (3, [])
        assert storage.insert(tenant, rows) == (0, [])
        latest = storage.latest(tenant, "pg-run")
        assert latest is not None
        assert latest["checkpoint_id"] in {"p0", "p1", "p2"}
        assert storage.runs(tenant, limit=10, cursor=None)[0][0]["checkpoints"] == 3
        storage.close()
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        engine.dispose()


# ---------------------------------------------------------------------------- CLI


def test_cli_keys_and_domains(tmp_path: Path) -> None:
    """keys create prints the key once (--json: {"api_key": …}); domains entitle/revoke flip the entitlement."""
    db = f"sqlite:///{tmp_path / 'cli-plane.db'}"
    runner = CliRunner()
    made = runner.invoke(
        cli,
        ["plane", "keys", "create", "--db", db, "--domain", "acme", "--project", "shop", "--json"],
    )
    assert made.exit_code == 0, made.output
    key = json.loads(made.output)["api_key"]
    storage = PlaneStorage(db)
    tenant = storage.authenticate(key)
    assert tenant is not None
    assert not tenant.entitled
    assert runner.invoke(cli, ["plane", "domains", "entitle", "--db", db, "acme"]).exit_code == 0
    assert storage.authenticate(key).entitled  # type: ignore[union-attr]
    revoked = runner.invoke(cli, ["plane", "domains", "revoke", "--db", db, "acme", "--json"])
    assert json.loads(revoked.output) == {"domain": "acme", "connected_state_plane": False}
    plain = runner.invoke(
        cli,
        ["plane", "keys", "create", "--db", db, "--domain", "acme", "--project", "b", "--entitled"],
    )
    assert plain.exit_code == 0
    assert plain.stdout.strip().startswith("dpk_")
    assert storage.authenticate(plain.stdout.strip()).entitled  # type: ignore[union-attr]
    storage.close()
    bad = runner.invoke(
        cli, ["plane", "keys", "create", "--db", db, "--domain", "", "--project", "p"]
    )
    assert bad.exit_code != 0
    assert "non-empty" in bad.output


def test_cli_outbox_status_and_release(tmp_path: Path, plane: PlaneHandle) -> None:
    """outbox status shows pending/synced/quarantined and the oldest pending age per project, and which
    projects have no connection; release re-queues quarantined rows."""
    url = f"sqlite:///{tmp_path / 'cli-store.db'}"
    with durability.open(url, settings=Settings()) as store:
        store.put(Checkpoint(thread_id="t", checkpoint_id="good", project_id="p1"))
        store.put(
            Checkpoint(thread_id="t", checkpoint_id="bad", project_id="p1", step_type="s" * 50)
        )
        store.put(Checkpoint(thread_id="t", checkpoint_id="orphan", project_id="p2"))
        conn = connect(store, plane.url, plane.key, project_id="p1", background=False)
        conn.drain()
        store.record_connection("p1", plane.url)  # as a live process would have it
        runner = CliRunner()
        shown = runner.invoke(cli, ["outbox", "status", url, "--json"])
        assert shown.exit_code == 0, shown.output
        rows = {r["project_id"]: r for r in json.loads(shown.output)}
        assert (rows["p1"]["pending"], rows["p1"]["synced"], rows["p1"]["quarantined"]) == (0, 1, 1)
        assert rows["p1"]["connected_to"] == plane.url
        assert rows["p2"]["pending"] == 1
        assert rows["p2"]["connected_to"] is None
        assert rows["p2"]["oldest_pending_age_seconds"] >= 0
        table = runner.invoke(cli, ["outbox", "status", url])
        assert "no connection" in table.output
        assert "p2" in table.output
        missing = runner.invoke(cli, ["outbox", "release", url, "nope"])
        assert missing.exit_code != 0
        assert "not quarantined" in missing.output
        released = runner.invoke(cli, ["outbox", "release", url, "bad", "--json"])
        assert json.loads(released.output) == {"released": 1}
        assert [e.checkpoint_id for e in store.outbox(state="pending")] == ["bad", "orphan"]
        conn.close()
    memory = runner.invoke(cli, ["outbox", "status", "memory://"])
    assert memory.exit_code != 0
    assert "does not replicate" in memory.output


def test_cli_plane_serve_runs_a_real_server(tmp_path: Path) -> None:
    """`durability plane serve` serves the plane a client connects and replicates to."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = f"sqlite:///{tmp_path / 'served.db'}"
    key = PlaneStorage(db).create_key("d", "p", entitled=True).api_key
    env = {**os.environ, "DURABILITY_PLANE_DB": db}
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from durability.cli import main; main()",
            "plane",
            "serve",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if (
                    httpx.get(url + "/public/v1/auth/check", headers={"X-API-Key": key}).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the plane did not start"
                assert server.poll() is None, "the plane exited"
                time.sleep(0.1)
        with durability.open(f"sqlite:///{tmp_path / 's.db'}", settings=Settings()) as store:
            store.put(Checkpoint(thread_id="served", checkpoint_id="c"))
            connect(store, url, key)
            assert disconnect(store, timeout=10)
        with PlaneClient(url, key) as client:
            latest = client.latest("served")
        assert latest is not None
        assert latest == {
            **checkpoint_to_wire(store_copy(latest)),
            "received_at": latest["received_at"],
        }
    finally:
        server.terminate()
        server.wait(10)


def store_copy(item: dict[str, Any]) -> Checkpoint:
    from durability.replication import checkpoint_from_wire

    return checkpoint_from_wire(item).evolve(seq=item["sequence"])
