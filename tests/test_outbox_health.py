"""The outbox tells its state honestly: puts never wait on a drain that backs off from a plane
that is down, ``durability outbox status`` tells a live drain from a record a gone process left
open (ages and sizes for people, numbers in --json), and the numbers are readable."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from plane_support import PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.cli import cli
from durability.clock import FrozenClock, system_clock
from durability.errors import ConfigError
from durability.humanize import format_age, format_bytes, parse_size
from durability.replication import Backoff, connect, disconnect
from durability.settings import Settings

STATE = {"blob": "z" * 40_000}


@pytest.fixture
def store_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'health.db'}"
    yield url
    with durability.open(url) as store:
        disconnect(store, timeout=5)


def test_puts_do_not_wake_a_drain_that_backs_off(store_url: str, down_plane: str) -> None:
    """While the plane is down the drain retries on its backoff: a put no longer runs a pass
    (each recorded a failed attempt on the whole batch, the write that made puts wait on the
    store's lock); a drain asked for explicitly still runs at once."""
    with durability.open(store_url, settings=Settings()) as store:
        store.put(Checkpoint(thread_id="t", state={"n": -1}))
        conn = connect(store, down_plane, "dpk_any", backoff=Backoff(initial=30, cap=30, jitter=0))
        worker = conn.worker
        assert worker is not None
        deadline = time.monotonic() + 10
        while len(worker.delays) < 1:
            assert time.monotonic() < deadline, "the first pass did not fail"
            time.sleep(0.01)
        for n in range(30):
            store.put(Checkpoint(thread_id="t", state={"n": n}))
        time.sleep(0.5)
        assert len(worker.delays) == 1, "a put ran a drain pass during the backoff"
        assert max(e.attempts for e in store.outbox()) == 1
        assert conn.drain(timeout=10) is True  # a kick does not wait for the backoff
        assert len(worker.delays) == 2
        conn.close(timeout=0)


def test_a_write_during_a_short_backoff_is_sent_once_the_plane_answers(
    store_url: str, plane: PlaneHandle
) -> None:
    """After a buffered answer, rows written meanwhile go at the next backoff step."""
    with durability.open(store_url, settings=Settings()) as store:
        plane.faults.faults.extend([503, 503])
        conn = connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())
        for n in range(5):
            store.put(Checkpoint(thread_id="t-later", state={"n": n}))
        deadline = time.monotonic() + 15
        while {e.state for e in store.outbox()} != {"synced"}:
            assert time.monotonic() < deadline, "the rows were not sent after the backoff"
            time.sleep(0.01)
        conn.close()


def status(url: str) -> tuple[str, list[dict[str, object]]]:
    runner = CliRunner()
    table = runner.invoke(cli, ["outbox", "status", url])
    data = runner.invoke(cli, ["outbox", "status", url, "--json"])
    assert table.exit_code == 0, table.output
    assert data.exit_code == 0, data.output
    return table.output, json.loads(data.output)


def test_status_shows_a_live_drain_with_its_age(store_url: str, plane: PlaneHandle) -> None:
    with durability.open(store_url, settings=Settings()) as store:
        conn = connect(store, plane.url, plane.key, http=plane.http(), project_id="shop")
        store.put(Checkpoint(thread_id="t", project_id="shop", state=STATE))
        assert conn.drain(timeout=10)
        conn.beat(force=True)
        table, rows = status(store_url)
        [row] = rows
        assert row["connection"] == "connected"
        assert row["drain"] == "live"
        assert isinstance(row["drain_seen_age_seconds"], float)
        assert row["last_acked_at"] is not None
        assert "connected, drain seen " in table
        conn.close()


def test_status_tells_a_record_left_open_by_a_gone_process(store_url: str) -> None:
    """A process that connected 31 days ago and died left its record open: status says no drain
    has been seen since, with ages and sizes for people, where it said "connected" and printed
    raw seconds (2674507.3); --json keeps the numbers."""
    then = system_clock() - timedelta(days=31, hours=2, minutes=5)
    with durability.open(store_url, settings=Settings(), clock=FrozenClock(then)) as store:
        store.record_connection("shop", "https://plane.example.com")
        store.record_heartbeat("shop")
        for n in range(30):
            store.put(Checkpoint(thread_id=f"t-{n}", project_id="shop", state=STATE))
    table, rows = status(store_url)
    [row] = rows
    assert (row["connection"], row["drain"]) == ("connected", "stale")
    assert "connected, but no drain since 31d 2h: the process that connected has gone" in table
    assert "31d 2h" in table
    assert " MiB" in table
    assert "2674" not in table
    assert isinstance(row["pending_bytes"], int)
    assert row["pending_bytes"] > 1_000_000
    assert 31 * 86_400 < row["oldest_pending_age_seconds"] < 32 * 86_400  # type: ignore[operator]


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"), (1_258_291, "1.2 MiB"), (3 * 2**30, "3.0 GiB")],
)
def test_sizes_for_people(size: int, text: str) -> None:
    assert format_bytes(size) == text


@pytest.mark.parametrize(
    ("age", "text"),
    [
        (timedelta(days=31, hours=2, minutes=5), "31d 2h"),
        (timedelta(minutes=4, seconds=10), "4m 10s"),
        (timedelta(seconds=4.7), "4s"),
        (timedelta(0), "0s"),
        (timedelta(hours=3), "3h"),
        (-5.0, "in 5s"),
        (2674507.3, "30d 22h"),
    ],
)
def test_ages_for_people(age: timedelta | float, text: str) -> None:
    assert format_age(age) == text


def test_sizes_read_back() -> None:
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("512 KB") == 512 * 1024
    assert parse_size("1048576") == 1048576
    for bad in ("lots", "0", "9" * 40):
        with pytest.raises(ConfigError, match="--max-body"):
            parse_size(bad, name="--max-body")


def test_the_ops_metrics_serve_replication_per_project(store_url: str, plane: PlaneHandle) -> None:
    """/metrics serves, per project, pending rows and bytes, the oldest pending row's age,
    quarantined rows and the last acknowledged batch: what to alert on."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from durability.plane import serve_in_thread
    from durability.service import create_ops_app

    with durability.open(store_url, settings=Settings()) as store:
        conn = connect(store, plane.url, plane.key, http=plane.http(), project_id="shop")
        store.put(Checkpoint(thread_id="t", project_id="shop", state=STATE))
        store.put(Checkpoint(thread_id="t", project_id="shop", step_type="s" * 50))
        assert conn.drain(timeout=10)
        conn.close()
        store.put(Checkpoint(thread_id="t2", project_id="shop", state=STATE))
        store.put(Checkpoint(thread_id="t3", project_id="other", state={"n": 1}))
        with serve_in_thread(create_ops_app(store, admin_token="a" * 32)) as ops:
            text = httpx.get(ops.url + "/metrics").text
    samples = {
        (s.name, s.labels.get("project")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("durability_outbox_read_ok", None)] == 1
    assert samples[("durability_outbox_pending_rows", "shop")] == 1
    assert samples[("durability_outbox_pending_bytes", "shop")] > 40_000
    assert samples[("durability_outbox_quarantined_rows", "shop")] == 1
    assert samples[("durability_outbox_pending_rows", "other")] == 1
    assert 0 <= samples[("durability_outbox_oldest_pending_age_seconds", "shop")] < 60
    acked = samples[("durability_outbox_last_ack_timestamp_seconds", "shop")]
    assert abs(acked - time.time()) < 60
    assert ("durability_outbox_last_ack_timestamp_seconds", "other") not in samples
