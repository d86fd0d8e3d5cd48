"""Every id a store accepts goes through the plane and back: the conformance suite's hostile ids
(line breaks, tabs, U+2028, U+0085, / ? # % .. ' ; and 10 KB) replicate and restore on every
provider that keeps an outbox, and a restore tells a router's 404, 414 or 431 from "the plane
holds nothing for this thread", failing loudly on the former."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_target
from plane_support import PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.errors import PlaneRoutingError, RestoreError
from durability.plane import serve_in_thread
from durability.replication import PlaneClient, connect, disconnect
from durability.restore import apply_restore, plan_restore
from durability.stores.base import Store
from durability.testing import HOSTILE_IDS, StoreTarget


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    target: StoreTarget
    for target in make_target(request.param, tmp_path):
        with target.open() as opened:
            yield opened
        disconnect(opened, timeout=5)


def test_hostile_ids_replicate_and_restore(
    store: Store, plane: PlaneHandle, tmp_path: Path
) -> None:
    """Each hostile id as thread, namespace and checkpoint id (a child checkpoint too) is synced,
    and a restore into a fresh store writes the thread back exactly."""
    for n, hostile in enumerate(HOSTILE_IDS):
        first = Checkpoint(
            thread_id=hostile, checkpoint_id=hostile, namespace=hostile, state={"n": n}
        )
        child = Checkpoint(
            thread_id=hostile,
            checkpoint_id=hostile + "/child",
            namespace=hostile,
            parent_checkpoint_id=hostile,
            state={"n": n, "child": True},
        )
        store.put_many([first, child])
    conn = connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())
    assert conn.close(timeout=30)
    assert {e.state for e in store.outbox()} == {"synced"}
    with (
        durability.open(f"sqlite:///{tmp_path / 'fresh.db'}") as fresh,
        PlaneClient(plane.url, plane.key) as client,
    ):
        for hostile in HOSTILE_IDS:
            plan = plan_restore(fresh, hostile, client=client)
            assert plan.source == "history"
            apply_restore(fresh, plan)
            assert [
                (c.checkpoint_id, c.namespace, c.parent_checkpoint_id, c.state)
                for c in fresh.history(hostile, hostile)
            ] == [
                (c.checkpoint_id, c.namespace, c.parent_checkpoint_id, c.state)
                for c in store.history(hostile, hostile)
            ], f"thread {hostile[:40]!r}"


class Router:
    """What may stand in front of a plane: a router or proxy that answers some paths itself, as
    a stock path router does (404 for a newline), or a proxy with request-line (414) and header
    (431) limits."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raw = scope.get("raw_path") or b""
        if scope["type"] == "http" and scope["path"].startswith("/public/v1/checkpoints/"):
            status = (
                404
                if "\n" in scope["path"]
                else 414
                if len(raw) > 4096
                else 431
                if b"%25" in raw
                else None
            )
            if status is not None:
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send(
                    {"type": "http.response.body", "body": b"Not Found" if status == 404 else b""}
                )
                return
        await self.app(scope, receive, send)


@pytest.mark.parametrize(
    ("thread", "status"),
    [("order\n42", 404), ("x" * 10_000, 414), ("percent%20id", 431)],
)
def test_a_routers_answer_is_not_nothing_on_the_plane(
    plane: PlaneHandle, tmp_path: Path, thread: str, status: int
) -> None:
    """A restore through a router that cannot route the id fails loudly (PlaneRoutingError, a
    RestoreError, naming the thread and the fix), where it used to report the thread missing;
    a thread the plane really lacks is still "nothing", through the router or not."""
    from durability.plane import create_app

    with (
        serve_in_thread(Router(create_app(plane.storage))) as routed,
        durability.open(f"sqlite:///{tmp_path / 'r.db'}") as fresh,
        PlaneClient(routed.url, plane.key) as client,
    ):
        with pytest.raises(PlaneRoutingError) as raised:
            plan_restore(fresh, thread, client=client)
        assert isinstance(raised.value, RestoreError)
        message = str(raised.value)
        assert repr(thread[:80]) in message
        assert f"HTTP {status}" in message
        assert "Fix: let every proxy and router" in message
        assert plan_restore(fresh, "plain-missing", client=client).empty
        assert client.latest("order 42 missing") is None  # echoed by the plane itself
