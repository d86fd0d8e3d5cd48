"""Shared fixtures: a store target per provider, isolated per test.

Postgres and Redis join when their servers answer on loopback (PostgreSQL 127.0.0.1:5432,
trust auth, database ``test``; Redis 127.0.0.1:6379). Each test gets its own Postgres schema
or Redis key prefix, removed afterwards, so tests can share the servers with other people's.
In CI (``CI=true``) a missing server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from durability.testing import StoreTarget

IN_CI = os.environ.get("CI", "").lower() == "true"

#: The replication tests' plane on loopback (fixtures ``served_plane`` and ``plane``).
pytest_plugins = ["plane_support"]

PROVIDERS = ["memory", "sqlite", "postgres", "redis"]

POSTGRES_URL = os.environ.get(
    "DURABILITY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("DURABILITY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def need_service(name: str, reason: str) -> None:
    """Skip (on a laptop) or fail (in CI) when a server the test needs is missing."""
    if IN_CI:
        pytest.fail(f"{name} is required in CI: {reason}")
    pytest.skip(f"{name} not available: {reason}")


def postgres_admin() -> object:
    """A SQLAlchemy engine on the test database, or a skip/fail when the server is missing."""
    import sqlalchemy as sa

    engine = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        engine.dispose()
        need_service("PostgreSQL", f"{POSTGRES_URL}: {exc}")
    return engine


#: The database the LangGraph Postgres tests hand PostgresSaver (a libpq URL; a schema per test).
LANGGRAPH_PG = "postgresql://" + POSTGRES_URL.split("://", 1)[1]


def langgraph_pg_engine() -> Any:
    """A SQLAlchemy engine on :data:`LANGGRAPH_PG`, or a skip/fail when the server is missing."""
    import sqlalchemy as sa

    engine = sa.create_engine(LANGGRAPH_PG.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError:
        need_service("PostgreSQL", "127.0.0.1:5432")
    return engine


@pytest.fixture
def pg_langgraph() -> Iterator[tuple[str, Any]]:
    """A schema written by the real PostgresSaver: (schema, saver), dropped afterwards with the
    sidecar schema a writable store adds beside it."""
    from langgraph.checkpoint.postgres import PostgresSaver

    engine = langgraph_pg_engine()
    schema = f"lg_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        url = f"{LANGGRAPH_PG}?options=-csearch_path%3D{schema}"
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            yield schema, saver
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}_durability" CASCADE')
        engine.dispose()


def fastaiagent_sdk(*args: str, cwd: Path) -> str:
    """What the real fastaiagent SDK printed, run on ``args`` by ``tests/fastaiagent_runs.py``
    in a subprocess in ``cwd`` (its failure fails the test with the SDK's error)."""
    import subprocess
    import sys

    script = Path(__file__).parent / "fastaiagent_runs.py"
    out = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def redis_admin() -> object:
    """A redis client on the test server, or a skip/fail when the server is missing."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except Exception as exc:
        client.close()
        need_service("Redis", f"{REDIS_URL}: {exc}")
    return client


def kill_postgres_sessions(engine: object, application_name: str) -> Callable[[], int]:
    """A callable that terminates every backend session opened under ``application_name``."""

    def kill() -> int:
        with engine.connect() as conn:  # type: ignore[attr-defined]
            rows = conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %(name)s AND pid <> pg_backend_pid()",
                {"name": application_name},
            ).all()
        return len(rows)

    return kill


def kill_redis_clients(client: object, client_name: str) -> Callable[[], int]:
    """A callable that CLIENT KILLs every connection named ``client_name``."""

    def kill() -> int:
        ids = [c["id"] for c in client.client_list() if c.get("name") == client_name]  # type: ignore[attr-defined]
        for client_id in ids:
            client.client_kill_filter(_id=client_id)  # type: ignore[attr-defined]
        return len(ids)

    return kill


def drop_redis_prefix(client: object, prefix: str) -> None:
    """Delete every key under ``prefix`` (SCAN + DEL of that prefix only, never FLUSHDB)."""
    batch = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):  # type: ignore[attr-defined]
        batch.append(key)
        if len(batch) >= 500:
            client.delete(*batch)  # type: ignore[attr-defined]
            batch.clear()
    if batch:
        client.delete(*batch)  # type: ignore[attr-defined]


def make_target(provider: str, tmp_path: Path) -> Iterator[StoreTarget]:
    """An isolated store location for ``provider``; cleaned up afterwards."""
    tag = uuid.uuid4().hex[:12]
    if provider == "memory":
        yield StoreTarget(f"memory://test-{tag}")
    elif provider == "sqlite":
        yield StoreTarget(
            f"sqlite:///{tmp_path / 'store.db'}", {"single_worker": True}, cross_process=True
        )
    elif provider == "sqlite-plain":
        yield StoreTarget(f"sqlite:///{tmp_path / 'plain.db'}", cross_process=True)
    elif provider == "postgres":
        engine = postgres_admin()
        schema, app = f"test_{tag}", f"durability-test-{tag}"
        url = f"{POSTGRES_URL}?schema={schema}&application_name={app}"
        try:
            yield StoreTarget(
                url, cross_process=True, kill_connections=kill_postgres_sessions(engine, app)
            )
        finally:
            with engine.begin() as conn:  # type: ignore[attr-defined]
                conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %(name)s",
                    {"name": app},
                )
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            engine.dispose()  # type: ignore[attr-defined]
    elif provider == "redis":
        client = redis_admin()
        prefix, name = f"durability-test-{tag}:", f"durability-test-{tag}"
        url = f"{REDIS_URL}?prefix={prefix}&client_name={name}"
        try:
            yield StoreTarget(
                url, cross_process=True, kill_connections=kill_redis_clients(client, name)
            )
        finally:
            drop_redis_prefix(client, prefix)
            client.close()  # type: ignore[attr-defined]
    else:  # pragma: no cover - guarded by PROVIDERS
        raise ValueError(provider)


@pytest.fixture(params=[*PROVIDERS, "sqlite-plain"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """A fresh store location on each provider."""
    yield from make_target(request.param, tmp_path)


#: The end of the replicated demo fleet (fixture ``replicated_demo``).
REPLICATED_DEMO_END = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture(scope="session")
def replicated_demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of the fleet `durability demo` builds (SQLite, ending at
    :data:`REPLICATED_DEMO_END`), replicated to its plane: synced, pending and quarantined rows,
    a recorded connection. The plane is stopped; the store is shared, so do not write to it."""
    from durability.demo import build_fleet

    with build_fleet(tmp_path_factory.mktemp("replicated-demo"), end=REPLICATED_DEMO_END) as fleet:
        return fleet.store_url
