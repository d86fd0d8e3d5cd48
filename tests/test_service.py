"""The ops service, served for real by uvicorn on loopback and driven with httpx.

Every store is written on a frozen clock starting at ``T0``: "old" threads at ``T0`` (past the
30-day waiting horizon at ``NOW``), "fresh" ones at ``T0 + 25d`` (not due). Requests sweep as of
``NOW`` through the body's ``now``, so nothing depends on the wall clock.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from conftest import make_target
from test_sweep import Raising

from durability import Checkpoint, ThreadRecord
from durability.clock import FrozenClock
from durability.errors import ConfigError
from durability.plane import serve_in_thread
from durability.service import ENV_ADMIN_TOKEN, create_ops_app
from durability.stores import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FRESH_AT = T0 + timedelta(days=25)
NOW = T0 + timedelta(days=33)
SWEEP = "/api/checkpoints/sweep"
TOKEN = secrets.token_urlsafe(24)
AS_OF_NOW = {"now": NOW.isoformat()}


class Ops:
    """A served ops app over one store, and an httpx client on it."""

    def __init__(self, store: Store, clock: FrozenClock, url: str, client: httpx.Client) -> None:
        self.store, self.clock, self.url, self.http = store, clock, url, client

    def sweep(self, body: Any = None, token: str | None = TOKEN) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.post(SWEEP, json=body, headers=headers)

    def write(self, thread_id: str, checkpoints: int = 2) -> None:
        self.store.put_many(
            [Checkpoint(thread_id=thread_id, state={"n": n}) for n in range(checkpoints)]
        )

    def threads(self) -> set[str]:
        return {r.thread_id for r in self.store.iter_threads()}


Serve = Callable[..., Ops]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Serve an ops app over a fresh store of ``provider`` (old and fresh threads written)."""
    cleanups: list[Callable[[], None]] = []

    def make(provider: str = "sqlite", **app_options: Any) -> Ops:
        targets = make_target(provider, tmp_path)
        target = next(targets)
        clock = FrozenClock(T0)
        store = target.open(clock=clock)
        running = serve_in_thread(create_ops_app(store, store.settings, TOKEN, **app_options))
        client = httpx.Client(base_url=running.url, timeout=30)
        cleanups.append(
            lambda: (client.close(), running.stop(), store.close(), next(targets, None))
        )
        ops = Ops(store, clock, running.url, client)
        ops.write("old-1")
        ops.write("old-2", checkpoints=5)
        clock.set(FRESH_AT)
        ops.write("fresh")
        return ops

    yield make
    for cleanup in reversed(cleanups):
        cleanup()


class Blocking:
    """A live-thread filter that holds the sweep until released (the concurrency test's fault)."""

    owner = "test-blocking"

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def claims(
        self, store: Store, candidates: Sequence[ThreadRecord], now: datetime
    ) -> Mapping[str, str]:
        self.entered.set()
        self.release.wait(20)
        return {}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 when the series is not there yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


# ---------------------------------------------------------------------------- auth


def test_the_sweep_needs_the_admin_token_missing_401_wrong_403(serve: Serve) -> None:
    """No token (or another scheme) is 401 with a Bearer challenge, a wrong one 403; neither deletes."""
    ops = serve()
    missing = ops.sweep(AS_OF_NOW, token=None)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in missing.json()["detail"]
    basic = ops.http.post(SWEEP, json=AS_OF_NOW, headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401
    wrong = ops.sweep(AS_OF_NOW, token=TOKEN + "x")
    assert wrong.status_code == 403
    assert ENV_ADMIN_TOKEN in wrong.json()["detail"]
    assert ops.threads() == {"old-1", "old-2", "fresh"}
    assert ops.sweep(AS_OF_NOW).status_code == 200


@pytest.mark.parametrize("token", [None, "", "   ", "short-token", "long-enough-but-naïve-token"])
def test_a_service_without_a_usable_token_refuses_to_start(tmp_path: Path, token: Any) -> None:
    """An absent, blank, short or non-ASCII admin token is refused at creation, naming DURABILITY_ADMIN_TOKEN."""
    from durability.stores import open_store

    with (
        open_store(f"sqlite:///{tmp_path / 's.db'}") as store,
        pytest.raises(ConfigError, match=ENV_ADMIN_TOKEN),
    ):
        create_ops_app(store, store.settings, token)


def test_serve_ops_without_the_variable_exits_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`durability serve-ops` with DURABILITY_ADMIN_TOKEN unset exits 1 before serving, naming it."""
    from durability.cli import cli

    monkeypatch.delenv(ENV_ADMIN_TOKEN, raising=False)
    result = CliRunner().invoke(cli, ["serve-ops", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 1
    assert ENV_ADMIN_TOKEN in result.output
    assert "ops service on" not in result.output


# ---------------------------------------------------------------------------- the sweep


def test_a_dry_run_returns_the_plan_and_deletes_nothing(serve: Serve) -> None:
    """The dry run answers one row per thread with its action; every thread is still there."""
    ops = serve()
    answer = ops.sweep({"dry_run": True, **AS_OF_NOW})
    assert answer.status_code == 200
    body = answer.json()
    assert body["dry_run"] is True
    actions = {row["thread_id"]: row["action"] for row in body["rows"]}
    assert actions == {"old-1": "delete", "old-2": "delete", "fresh": "not_due"}
    assert body["summary"]["counts"]["waiting"]["delete"] == 2
    assert body["summary"]["total_delete"]["checkpoints"] == 7
    assert ops.threads() == {"old-1", "old-2", "fresh"}


@pytest.mark.parametrize(
    "provider", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_sweep_deletes_the_due_threads(serve: Serve, provider: str) -> None:
    """A real sweep deletes the threads past their waiting horizon and keeps the fresh one."""
    ops = serve(provider)
    answer = ops.sweep(AS_OF_NOW)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dry_run"] is False
    assert ops.threads() == {"fresh"}
    deleted = body["deleted"]["waiting"]
    assert sorted(deleted["thread_ids"]) == ["old-1", "old-2"]
    assert (deleted["threads"], deleted["checkpoints"]) == (2, 7)
    again = ops.sweep(AS_OF_NOW)
    assert again.status_code == 200
    assert ops.threads() == {"fresh"}


def test_metrics_count_the_spared_parked_thread_and_the_deleted_ones(serve: Serve) -> None:
    """After a sweep that spares a parked finished thread, /metrics shows spared{finished,park} and the deletions."""
    ops = serve()
    ops.store.put(Checkpoint(thread_id="parked", state={"n": 0}))
    ops.store.park(
        Checkpoint(thread_id="parked", state={"asked": True}),
        deadline=FRESH_AT + timedelta(days=20),
        reason="waiting for approval",
    )
    ops.store.mark_finished("parked")  # due at FRESH_AT + 7d, before NOW; the park outlives NOW
    before = ops.http.get("/metrics").text
    assert ops.sweep(AS_OF_NOW).status_code == 200
    answer = ops.http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = answer.text
    spared = "durability_checkpoint_sweep_spared_total"
    deleted = "durability_checkpoint_sweep_deleted_threads_total"
    labels = {"horizon": "finished", "owner": "park"}
    assert metric(after, spared, **labels) == metric(before, spared, **labels) + 1
    assert (
        metric(after, deleted, horizon="waiting") == metric(before, deleted, horizon="waiting") + 2
    )
    assert ops.threads() == {"fresh", "parked"}


def test_a_failing_filter_fails_the_sweep_and_deletes_nothing(serve: Serve) -> None:
    """A filter that raises makes the route answer an error naming it; every thread is kept."""
    ops = serve(filters=[Raising()])
    answer = ops.sweep(AS_OF_NOW)
    assert answer.status_code == 409
    assert answer.json()["error"] == "SweepError"
    assert "the flows database is down" in answer.json()["detail"]
    assert ops.threads() == {"old-1", "old-2", "fresh"}


def test_a_second_sweep_while_one_runs_gets_409(serve: Serve) -> None:
    """While a sweep runs, another request is refused with 409; the first then completes."""
    blocking = Blocking()
    ops = serve(filters=[blocking])
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(ops.sweep, AS_OF_NOW)
        assert blocking.entered.wait(20)
        second = ops.sweep({"dry_run": True, **AS_OF_NOW})
        blocking.release.set()
        assert second.status_code == 409
        assert "already running" in second.json()["detail"]
        assert first.result(20).status_code == 200
    assert ops.threads() == {"fresh"}


# ---------------------------------------------------------------------------- other routes, bad input


def test_the_removed_prune_route_answers_410_naming_the_sweep(serve: Serve) -> None:
    """POST /api/babelfish/checkpoints/prune is gone: 410 naming POST /api/checkpoints/sweep."""
    ops = serve()
    answer = ops.http.post("/api/babelfish/checkpoints/prune", json={"days": 7})
    assert answer.status_code == 410
    assert answer.json()["replacement"] == "POST /api/checkpoints/sweep"
    assert ops.threads() == {"old-1", "old-2", "fresh"}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{not json", "not JSON"),
        (b"[true]", "JSON object"),
        (b'{"dryrun": true}', "'dryrun'"),
        (b'{"dry_run": "yes"}', "dry_run"),
        (b'{"now": "2026-02-03T00:00:00"}', "timezone"),
        (b'{"now": "next tuesday"}', "now="),
    ],
)
def test_a_bad_body_is_refused_400_naming_the_field(serve: Serve, body: bytes, named: str) -> None:
    """A body the route cannot read is 400 with the field and the fix; nothing is deleted."""
    ops = serve()
    answer = ops.http.post(SWEEP, content=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 400
    assert named in answer.json()["detail"]
    assert ops.threads() == {"old-1", "old-2", "fresh"}


def test_the_token_never_appears_in_logs_reprs_or_answers(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused and accepted requests log without the token; the app's and service's reprs hide it."""
    caplog.set_level(logging.DEBUG)
    ops = serve()
    wrong = TOKEN[::-1]
    answers = [
        ops.sweep(AS_OF_NOW, token=None),
        ops.sweep(AS_OF_NOW, token=wrong),
        ops.sweep({"dry_run": True, **AS_OF_NOW}),
        ops.sweep(AS_OF_NOW),
    ]
    assert [a.status_code for a in answers] == [401, 403, 200, 200]
    assert "refused a sweep request" in caplog.text
    for text in (caplog.text, *(a.text for a in answers)):
        assert TOKEN not in text
        assert wrong not in text
    app = create_ops_app(ops.store, ops.store.settings, TOKEN)
    for shown in (repr(app), repr(app.state.ops), repr(app.state._state), str(app.state.ops)):
        assert TOKEN not in shown
