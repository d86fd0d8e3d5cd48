"""Every exception a public call raises on a bad value is a durability.errors class (never a bare
OverflowError or TypeError from below), and durations are accepted as text wherever a timedelta
is: the runner's lease_ttl and timeout, an ask's deadline, a lease's ttl, the CLI's timeouts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click
import pytest
from conftest import make_target

import durability
from durability import Checkpoint
from durability.cli._common import Duration
from durability.clock import FrozenClock, parse_aware
from durability.errors import ConfigError, DurabilityError
from durability.runs import RunContext, Runner
from durability.settings import Settings, parse_duration

FAR_WEST = timezone(timedelta(hours=-23, minutes=-59))


@pytest.mark.parametrize("provider", ["memory", "sqlite", "postgres", "redis"])
def test_bad_values_raise_durability_errors(provider: str, tmp_path: Path) -> None:
    """A far-future non-UTC created_at (was a bare OverflowError), a step past 64 bits (an
    OverflowError on SQLite), a lease ttl past the year 9999: each refused by name, store untouched."""
    for target in make_target(provider, tmp_path):
        with target.open() as store:
            refusals = {
                "created_at": lambda: store.put(
                    Checkpoint(
                        thread_id="t", created_at=datetime(9999, 12, 31, 23, 59, tzinfo=FAR_WEST)
                    )
                ),
                "step": lambda: store.put(Checkpoint(thread_id="t", step=2**80)),
                "iteration": lambda: store.put(Checkpoint(thread_id="t", iteration=-(2**70))),
                "lease": lambda: store.acquire_lease("t", "me", timedelta(days=999_999_999)),
            }
            for what, call in refusals.items():
                with pytest.raises(DurabilityError) as raised:
                    call()
                assert isinstance(raised.value, ValueError), what
            assert not store.has_thread("t")
            assert store.acquire_lease("t", "me", "30s").holder == "me"


@pytest.mark.parametrize(
    "text", ["99999999999999999d", "P99999999999999999W", "9" * 400 + "s", "zz", ""]
)
def test_parse_duration_refuses_by_name(text: str) -> None:
    with pytest.raises(ConfigError, match="lease_ttl"):
        parse_duration(text, name="lease_ttl")


def test_a_bad_store_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="port"):
        durability.open("redis://127.0.0.1:99999/0")


def test_an_overflowing_time_is_not_a_time() -> None:
    """Text that overflows once converted to UTC reads as no time (the ops service answers 400)."""
    assert parse_aware("9999-12-31T23:59:59-23:59") is None
    assert parse_aware("0001-01-01T00:00:00+23:59") is None
    assert parse_aware("2026-01-01T00:00:00+01:00") == datetime(2025, 12, 31, 23, tzinfo=UTC)


def ask(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    return {**state, "answer": ctx.interrupt("approve?", deadline="2d")}


def test_durations_as_text_wherever_a_timedelta_is(tmp_path: Path) -> None:
    """Runner(lease_ttl="3s") used to fail with a TypeError; text durations now work for the
    lease, the timeout and an ask's deadline, and a bad one is refused by name."""
    runner = Runner("asker", [ask], lease_ttl="3s", timeout="10m")
    assert (runner.lease_ttl, runner.timeout) == (timedelta(seconds=3), timedelta(minutes=10))
    assert runner.heartbeat == 1.0
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    now = datetime(2026, 3, 1, tzinfo=UTC)
    with durability.open(
        url, settings=Settings(), single_worker=True, clock=FrozenClock(now)
    ) as store:
        parked = runner.start(store, {"n": 1})
        assert parked.status == "parked"
        assert parked.park is not None
        assert parked.park.deadline == now + timedelta(days=2)
    for bad in ("3", "soon", timedelta(0)):
        with pytest.raises(ConfigError, match="lease_ttl"):
            Runner("asker", [ask], lease_ttl=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("0.5", 0.5), ("2m", 120.0), ("PT1S", 1.0)]
)
def test_the_cli_reads_durations(text: str, seconds: float) -> None:
    assert Duration().convert(text, None, None) == seconds


def test_the_cli_refuses_a_bad_duration() -> None:
    with pytest.raises(click.BadParameter, match="not a duration"):
        Duration().convert("soonish", None, None)
