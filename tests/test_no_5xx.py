"""No server here answers 5xx to anything a client sends, and none stops serving.

Hypothesis posts arbitrary JSON bodies (and item-shaped ones, with hostile values: NUL, line
breaks, huge numbers, times that overflow in UTC, wrong types) and arbitrary paths and query
strings to every route of the plane (over SQLite and Postgres) and of the ops service, each
served by uvicorn on loopback; a chunked 100 MB body to a plane served as its own process is
refused with 413 while the process's memory stays bounded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import POSTGRES_URL, make_target, postgres_admin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plane_support import WIRE_KEYS, PlaneHandle

from durability import Checkpoint
from durability.clock import FrozenClock
from durability.plane import PlaneStorage, create_app, serve_in_thread
from durability.service import create_ops_app

TOKEN = "t" * 32
INGEST = "/public/v1/checkpoints/ingest"
HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "a\x00b",
        "line\nbreak",
        "\u2028",
        "\u0085",
        "..",
        "/",
        "%2F",
        "9999-12-31T23:59:59-23:59",
        "0001-01-01T00:00:00+23:59",
        "9999-12-31T23:59:59",
        "9999-12-31T23:59:59+00:00",
        "0001-01-01T00:00:00+00:00",
        "2026-13-45T99:99:99Z",
        "completed",
        "run_end",
        "agent",
        "🚀",
    ]
) | st.integers(3000, 6000).map(lambda n: "x" * n)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | HOSTILE_TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=12) | st.sampled_from(WIRE_KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)
ITEM = st.fixed_dictionaries(
    {
        "checkpoint_id": st.text(min_size=1, max_size=20) | HOSTILE_TEXT,
        "execution_id": HOSTILE_TEXT,
    },
    optional=dict.fromkeys(WIRE_KEYS[2:], JSON)
    | {"metadata": st.fixed_dictionaries({}, optional={"durability": JSON})},
)
INGEST_BODY = st.fixed_dictionaries({"checkpoints": st.lists(ITEM | JSON, max_size=6)}) | JSON
PATH_TEXT = st.text(max_size=30) | HOSTILE_TEXT
PROPERTY = settings(
    max_examples=int(os.environ.get("DURABILITY_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer past 64 bits: send it as text JSON holds it
        import json

        return json.dumps(value).encode()


class Served:
    """A served app and a client on it; ``check`` asserts an answer is not a 5xx."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def check(self, method: str, path: str, **options: Any) -> httpx.Response:
        response = self.http.request(method, path, **options)
        assert response.status_code < 500, (method, path, response.status_code, response.text[:300])
        return response


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def plane_served(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Served]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('p5xx') / 'plane.db'}"
        cleanup = None
    else:
        engine: Any = postgres_admin()
        schema = f"plane_5xx_{uuid.uuid4().hex[:10]}"
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        url = f"{POSTGRES_URL.split('?')[0]}?options=-csearch_path%3D{schema}"

        def cleanup() -> None:
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            engine.dispose()

    storage = PlaneStorage(url)
    key = storage.create_key("d5xx", "p5xx", entitled=True).api_key
    app = create_app(storage)
    with serve_in_thread(app) as running:
        served = Served(running.url, {"X-API-Key": key})
        yield served
        app.state.plane.compat = False
        assert served.http.get("/public/v1/policy").status_code == 200, "the plane stopped serving"
        served.http.close()
    storage.close()
    if cleanup is not None:
        cleanup()


@given(body=INGEST_BODY, compat=st.booleans())
@PROPERTY
def test_ingest_answers_no_5xx(plane_served: Served, body: Any, compat: bool) -> None:
    """Any JSON body, any item: 201 (problems as per-item rejections naming the item), or a 4xx."""
    plane_served.http.headers["X-Compat"] = str(compat)  # informational only
    answer = plane_served.check("POST", INGEST, content=dumps(body))
    if answer.status_code == 201:
        for rejection in answer.json()["rejections"]:
            assert {"checkpoint_id", "execution_id", "reason"} <= set(rejection)


@given(
    method_path=st.sampled_from(
        [
            ("GET", "/public/v1/auth/check"),
            ("GET", "/public/v1/policy"),
            ("POST", "/public/v1/governance/enroll"),
            ("POST", "/public/v1/sdk/agents"),
            ("GET", "/public/v1/runs"),
            ("GET", "/public/v1/checkpoints/{}"),
            ("GET", "/public/v1/checkpoints/{}/latest"),
        ]
    ),
    segment=PATH_TEXT,
    body=JSON,
    query=st.dictionaries(st.sampled_from(["limit", "cursor", "x"]), PATH_TEXT, max_size=2),
    key=st.sampled_from([None, "", "dpk_wrong", "\x7f", "k" * 3000]),
)
@PROPERTY
def test_every_plane_route_answers_no_5xx(
    plane_served: Served,
    method_path: tuple[str, str],
    segment: str,
    body: Any,
    query: dict[str, str],
    key: str | None,
) -> None:
    method, template = method_path
    from urllib.parse import quote

    path = template.format(quote(segment, safe="") or "x")
    headers = {} if key is None else {"X-API-Key": key}
    content = dumps(body) if method == "POST" else None
    if key is not None and not key.isprintable():
        return  # httpx refuses such a header before sending
    plane_served.check(method, path, content=content, params=query, headers=headers)


@pytest.fixture(scope="module")
def ops_served(tmp_path_factory: Any) -> Iterator[tuple[Served, Any]]:
    for target in make_target("sqlite", tmp_path_factory.mktemp("ops5xx")):
        clock = FrozenClock(datetime(2026, 1, 1, tzinfo=UTC))
        with (
            target.open(clock=clock) as store,
            serve_in_thread(create_ops_app(store, admin_token=TOKEN)) as running,
        ):
            served = Served(running.url, {"Authorization": f"Bearer {TOKEN}"})
            yield served, store
            assert served.http.get("/metrics").status_code == 200, "the service stopped serving"
            served.http.close()


@given(
    body=JSON
    | st.fixed_dictionaries(
        {}, optional={"dry_run": st.booleans() | JSON, "now": HOSTILE_TEXT | JSON}
    ),
    route=st.sampled_from(
        ["/api/checkpoints/sweep", "/api/babelfish/checkpoints/prune", "/metrics"]
    ),
)
@PROPERTY
def test_every_ops_route_answers_no_5xx(
    ops_served: tuple[Served, Any], body: Any, route: str
) -> None:
    """Any body to the sweep (with the admin token, over a store holding threads), the removed
    prune route and the metrics: never a 5xx."""
    served, store = ops_served
    store.put(Checkpoint(thread_id=f"t-{uuid.uuid4().hex[:8]}", state={"n": 1}))
    method = "GET" if route == "/metrics" else "POST"
    served.check(method, route, content=dumps(body) if method == "POST" else None)


# ---------------------------------------------------------------------------- bounded bodies


def served_plane_process(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """``durability plane serve`` as its own process; its URL and a key."""
    db = f"sqlite:///{tmp_path / 'bounded.db'}"
    key = PlaneStorage(db).create_key("d", "p", entitled=True).api_key
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durability",
            "plane",
            "serve",
            "--db",
            db,
            "--port",
            str(port),
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/public/v1/policy", headers={"X-API-Key": key})
            return server, url, key
        except httpx.TransportError:
            assert server.poll() is None, "the plane exited"
            assert time.monotonic() < deadline, "the plane did not start"
            time.sleep(0.1)


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.slow
def test_a_chunked_100_mb_body_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    """A chunked body (no Content-Length) past the cap gets 413 while it streams in: the plane's
    peak memory grows by about the cap, never by the body, and it goes on serving."""
    server, url, key = served_plane_process(tmp_path, "--max-body", "8MiB")
    try:
        before = memory_kib(server.pid, "VmHWM")
        megabyte = b"x" * (1 << 20)
        answer = httpx.post(
            url + INGEST,
            content=(megabyte for _ in range(100)),
            headers={"X-API-Key": key},
            timeout=60,
        )
        assert answer.status_code == 413
        assert "8388608-byte limit" in answer.json()["detail"]
        grown_mib = (memory_kib(server.pid, "VmHWM") - before) / 1024
        assert grown_mib < 40, f"the plane's peak memory grew by {grown_mib:.0f} MiB"
        declared = httpx.post(
            url + INGEST, content=megabyte * 9, headers={"X-API-Key": key}, timeout=60
        )
        assert declared.status_code == 413
        assert "9437184 bytes" in declared.json()["detail"]
        ok = httpx.post(url + INGEST, content=b'{"checkpoints": []}', headers={"X-API-Key": key})
        assert ok.status_code == 201
    finally:
        server.terminate()
        server.wait(10)


def test_overflowing_timestamps_are_refused_by_name(tmp_path: Path) -> None:
    """A created_at that overflows once converted to UTC was a 500 (the whole outbox stalled on
    it): now a per-item rejection naming the item inside the 201, and a 422 in compat mode."""
    storage = PlaneStorage(f"sqlite:///{tmp_path / 'overflow.db'}")
    key = storage.create_key("d", "p", entitled=True).api_key
    app = create_app(storage)
    items = [
        {"checkpoint_id": "late", "execution_id": "e", "created_at": "9999-12-31T23:59:59-23:59"},
        {"checkpoint_id": "ok", "execution_id": "e", "created_at": "2026-01-01T00:00:00Z"},
    ]
    body = orjson.dumps({"checkpoints": items})
    with serve_in_thread(app) as running:
        answer = httpx.post(running.url + INGEST, content=body, headers={"X-API-Key": key})
        assert answer.status_code == 201
        assert answer.json()["ingested"] == 1
        [rejection] = answer.json()["rejections"]
        assert (rejection["checkpoint_id"], rejection["execution_id"]) == ("late", "e")
        assert "overflows in UTC" in rejection["reason"]
        app.state.plane.compat = True
        refused = httpx.post(running.url + INGEST, content=body, headers={"X-API-Key": key})
        assert refused.status_code == 422
        assert refused.json()["checkpoint_id"] == "late"
    storage.close()


def test_the_client_splits_a_batch_to_fit_the_announced_body_cap(
    plane: PlaneHandle, tmp_path: Path
) -> None:
    """The plane announces its body cap; the drain cuts batches to fit it, so a body-size 413
    never happens and no row is quarantined for it."""
    import durability
    from durability.replication import connect, drain_once
    from durability.settings import Settings

    plane.plane.caps = type(plane.plane.caps)(body_bytes=30_000)
    with durability.open(f"sqlite:///{tmp_path / 'split.db'}", settings=Settings()) as store:
        for n in range(12):
            store.put(Checkpoint(thread_id="t-split", state={"n": n, "pad": "y" * 8000}))
        conn = connect(store, plane.url, plane.key, background=False, http=plane.http())
        assert conn.limits.body_bytes == 30_000
        report = drain_once(conn)
        assert (report.synced, report.quarantined, report.buffered) == (12, 0, 0)
        assert report.requests == 4, "three rows per body fit; a refused body costs more"
        conn.close()
    assert len(plane.ids_on_plane("t-split")) == 12
