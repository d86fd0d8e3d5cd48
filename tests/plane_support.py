"""A real plane on loopback for the replication tests, with a fault layer in front of its ingest door.

The plane is the project's own (``durability.plane``) served by uvicorn on 127.0.0.1 on an
ephemeral port, once per test session; each test gets a fresh tenant (domain, project, key) on
it, so tests never see each other's checkpoints. :class:`FaultLayer` is ASGI middleware: each
ingest request takes the next fault from its queue (none: the plane answers), so a test scripts
5xx bursts, 429s, redirects, dropped connections (the server closes the socket mid-answer, so the
client sees a real protocol error), slow answers past the client's timeout, or a request held on
an event while the test writes. It also screens batches: a batch carrying a row named in
``refuse_carrying`` is refused with that row's status (naming nothing, so only bisection finds
it), and ``misaddressed`` rejections are added to the plane's 201 for ids the batch does not carry.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from durability.plane import PlaneCaps, PlaneStorage, create_app, serve_in_thread
from durability.plane.app import Plane
from durability.replication import Backoff, PlaneLimits
from durability.replication.wire import store_ids

INGEST = "/public/v1/checkpoints/ingest"
READS = "/public/v1/checkpoints/"

#: The fastaiagent wire item's keys, in this order.
WIRE_KEYS = [
    "checkpoint_id",
    "execution_id",
    "resource_type",
    "agent_id",
    "chain_id",
    "node_id",
    "step_index",
    "step_type",
    "status",
    "parent_checkpoint_id",
    "state_snapshot",
    "metadata",
    "created_at",
    "sequence",
]

#: Limits that disable the client's own cap checks, so the plane's refusals are what gets tested.
NO_LOCAL_CAPS = PlaneLimits(
    state_bytes=10**12, step_type_chars=10**9, agent_id_chars=10**9, body_bytes=10**12
)


class FaultLayer:
    """ASGI middleware that injects the next queued fault into each ingest request.

    Faults: an HTTP status (``503``, ``429``, ``302`` …) answered without reaching the plane;
    ``"drop"`` (the server closes the connection mid-answer, the plane never sees the batch);
    ``"drop-after"`` (the plane ingests, then the answer is lost the same way); ``"slow"``
    (answers after ``slow_seconds``, past the client's timeout; the plane still ingests);
    ``"hold"`` (waits until ``release`` is set; ``held`` is set while it waits). ``paths`` records
    the path of every HTTP request, so a test can assert that nothing reached the plane.

    Screens, applied to requests with no queued fault: ``refuse_carrying`` maps a checkpoint id
    to a status that refuses any batch carrying it (the plane never sees that batch), and
    ``misaddressed`` maps checkpoint ids to reasons the plane's 201 also "rejects" whenever the
    batch does not carry them (a plane answering about rows it was not sent).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.faults: deque[Any] = deque()
        self.seen: list[Any] = []
        self.paths: list[str] = []
        self.slow_seconds = 0.6
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.refuse_carrying: dict[str, int] = {}
        self.misaddressed: dict[str, str] = {}

    def reset(self) -> None:
        with self.lock:
            self.faults.clear()
            self.seen.clear()
            self.paths.clear()
            self.refuse_carrying.clear()
            self.misaddressed.clear()
        self.held.clear()
        self.release.clear()

    @property
    def ingest_requests(self) -> int:
        with self.lock:
            return len(self.seen)

    @property
    def checkpoint_reads(self) -> int:
        """How many requests read checkpoints (latest or history) from the plane."""
        with self.lock:
            return sum(1 for p in self.paths if p.startswith(READS) and p != INGEST)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            with self.lock:
                self.paths.append(scope["path"])
        if scope["type"] != "http" or scope["path"] != INGEST:
            await self.app(scope, receive, send)
            return
        with self.lock:
            fault = self.faults.popleft() if self.faults else None
            self.seen.append(fault)
        if fault is None and (self.refuse_carrying or self.misaddressed):
            await self._screen(scope, receive, send)
        elif fault is None:
            await self.app(scope, receive, send)
        elif isinstance(fault, int):
            await read_body(receive)
            headers = []
            if fault == 429:
                headers.append((b"retry-after", b"0"))
            if 300 <= fault < 400:
                headers.append((b"location", b"/elsewhere"))
            await _answer(send, fault, b'{"detail": "injected fault"}', headers)
        elif fault == "drop":
            await read_body(receive)
            await _cut(send)
        elif fault == "drop-after":
            await self.app(scope, receive, _swallow)
            await _cut(send)
        elif fault == "slow":
            await asyncio.sleep(self.slow_seconds)
            await self.app(scope, receive, send)
        elif fault == "hold":
            self.held.set()
            await asyncio.to_thread(self.release.wait, 30)
            await self.app(scope, receive, send)
        else:  # pragma: no cover - a typo in a test
            raise ValueError(fault)

    async def _screen(self, scope: Any, receive: Any, send: Any) -> None:
        body = await read_body(receive)
        carried = {item.get("checkpoint_id") for item in json.loads(body)["checkpoints"]}
        refusal = next((s for cid, s in self.refuse_carrying.items() if cid in carried), None)
        if refusal is not None:
            await _answer(send, refusal, b'{"detail": "injected refusal"}')
            return
        replay = replayed(body)

        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                chunks.append(message.get("body", b""))

        await self.app(scope, replay, capture)
        answer = b"".join(chunks)
        if start["status"] == 201:
            data = json.loads(answer)
            data["rejections"] += [
                {"checkpoint_id": cid, "reason": why}
                for cid, why in self.misaddressed.items()
                if cid not in carried
            ]
            answer = json.dumps(data).encode()
        await _answer(send, start["status"], answer)


def replayed(body: bytes) -> Callable[[], Awaitable[Any]]:
    """An ASGI ``receive`` that hands an app ``body`` once (a request read before it is passed
    on), then says the client went away."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def read_body(receive: Any) -> bytes:
    """Read the whole request body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _answer(
    send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Send a whole JSON answer."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _swallow(message: Any) -> None:
    return None


async def _cut(send: Any) -> None:
    """Start an answer, then fail: uvicorn closes the socket, the client sees a protocol error."""
    await send(
        {"type": "http.response.start", "status": 201, "headers": [(b"content-length", b"1000")]}
    )
    await send({"type": "http.response.body", "body": b'{"ingested"', "more_body": True})
    raise ConnectionAbortedError("injected dropped connection")


@dataclass
class PlaneHandle:
    """The session's plane, seen from one test: a fresh tenant and the fault layer."""

    url: str
    storage: PlaneStorage
    plane: Plane
    faults: FaultLayer
    domain: str = ""
    project: str = ""
    key: str = ""
    clients: list[httpx.Client] = field(default_factory=list)

    def new_key(
        self, *, entitled: bool = True, domain: str | None = None, project: str | None = None
    ) -> str:
        """A key for a new tenant (or the given domain/project)."""
        made = self.storage.create_key(
            domain or f"dom-{uuid.uuid4().hex[:10]}",
            project or f"proj-{uuid.uuid4().hex[:10]}",
            entitled=entitled,
        )
        self.domain, self.project, self.key = made.domain_id, made.project_id, made.api_key
        return made.api_key

    def http(self, timeout: float = 5.0) -> httpx.Client:
        """An HTTP client for a connection (closed after the test)."""
        client = httpx.Client(timeout=timeout)
        self.clients.append(client)
        return client

    def tenant(self, key: str | None = None) -> Any:
        tenant = self.storage.authenticate(key or self.key)
        assert tenant is not None
        return tenant

    def ids_on_plane(self, execution_id: str, key: str | None = None) -> list[str]:
        """The checkpoint ids the plane holds for an execution, oldest first, as a restore reads
        them (a row sent under a derived wire id has its own id back)."""
        items, cursor = self.storage.history(
            self.tenant(key), execution_id, limit=1000, cursor=None
        )
        assert cursor is None
        return [store_ids(i)[0] for i in items]


@dataclass
class _Served:
    url: str
    storage: PlaneStorage
    plane: Plane
    faults: FaultLayer


@pytest.fixture(scope="session")
def served_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Served]:
    """The project's plane on 127.0.0.1 (ephemeral port), for the whole session."""
    path: Path = tmp_path_factory.mktemp("plane") / "plane.db"
    storage = PlaneStorage(f"sqlite:///{path}")
    app = create_app(storage)
    faults = FaultLayer(app)
    running = serve_in_thread(faults)
    yield _Served(running.url, storage, app.state.plane, faults)
    running.stop()
    storage.close()


@pytest.fixture
def plane(served_plane: _Served) -> Iterator[PlaneHandle]:
    """The session plane with a fresh entitled tenant, default (per-item rejection) mode, history
    served, no faults."""
    served_plane.faults.reset()
    served_plane.plane.compat = False
    served_plane.plane.history = True
    handle = PlaneHandle(
        served_plane.url, served_plane.storage, served_plane.plane, served_plane.faults
    )
    handle.new_key()
    yield handle
    served_plane.faults.release.set()
    served_plane.faults.reset()
    served_plane.plane.compat = False
    served_plane.plane.history = True
    served_plane.plane.caps = PlaneCaps()
    for client in handle.clients:
        client.close()


def fast_backoff() -> Backoff:
    """Retry delays of a few milliseconds (the injected backoff clock of the tests)."""
    return Backoff(initial=0.002, cap=0.01, jitter=0.0)


@pytest.fixture
def down_plane() -> str:
    """The URL of a plane that is down: nothing listens on its loopback port any more."""
    from starlette.applications import Starlette

    gone = serve_in_thread(Starlette())
    gone.stop()
    return gone.url
