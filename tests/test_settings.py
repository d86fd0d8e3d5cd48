"""Settings and the retention rules, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durability.errors import ConfigError, ParkRefused, RetentionError
from durability.settings import (
    Retention,
    Settings,
    check_park_deadline,
    declare_retention,
    due_at,
    finished_horizon,
    format_duration,
    parse_duration,
    waiting_horizon,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)
PLATFORM = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        (" 7D ", timedelta(days=7)),
        ("P30D", timedelta(days=30)),
        ("PT12H", timedelta(hours=12)),
        ("P1DT2H30M", timedelta(days=1, hours=2, minutes=30)),
        ("P1W", timedelta(weeks=1)),
        ("pt0.5h", timedelta(minutes=30)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    """Durations read in the short and the ISO 8601 forms."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "thirty days", "P", "PT", "-5d", "0d", "P0D", "5x"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    """A value that is not a positive duration is refused naming the setting and the forms."""
    with pytest.raises(ConfigError, match="DURABILITY_WAITING_RETENTION") as info:
        parse_duration(text, name="DURABILITY_WAITING_RETENTION")
    assert isinstance(info.value, ValueError)


def test_format_duration_reads_back() -> None:
    """format_duration writes what parse_duration reads."""
    for value in (timedelta(days=30), timedelta(days=1, hours=12), timedelta(seconds=90)):
        assert parse_duration(format_duration(value)) == value


def test_defaults_and_environment() -> None:
    """The defaults are 30 and 7 days; the environment overrides them."""
    assert Settings.from_env({}) == Settings(url="sqlite:///durability.db")
    settings = Settings.from_env(
        {
            "DURABILITY_WAITING_RETENTION": "10d",
            "DURABILITY_FINISHED_RETENTION": "PT12H",
            "DURABILITY_URL": "memory://",
        }
    )
    assert (settings.url, settings.waiting_retention, settings.finished_retention) == (
        "memory://",
        timedelta(days=10),
        timedelta(hours=12),
    )


@pytest.mark.parametrize(
    "legacy", ["LLM_PROVIDER_CHECKPOINT_TTL_MINUTES", "FLOW_CHECKPOINT_RETENTION_DAYS"]
)
def test_removed_variables_are_refused_at_boot_and_on_every_write(
    legacy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment still setting a removed variable is refused, naming it and its replacement."""
    with pytest.raises(ConfigError, match=legacy) as info:
        Settings.from_env({legacy: "60"})
    assert "DURABILITY_WAITING_RETENTION" in str(info.value)
    settings = Settings()
    monkeypatch.setenv(legacy, "60")
    with pytest.raises(ConfigError, match=legacy):
        Settings()
    with pytest.raises(ConfigError, match=legacy):
        settings.update(waiting_retention=timedelta(days=3))


def test_declared_retention_is_shorter_only() -> None:
    """A declared value above the platform's is refused naming both values, never shortened."""
    assert declare_retention(PLATFORM, waiting="10d", finished="2d") == Retention(
        timedelta(days=10), timedelta(days=2)
    )
    with pytest.raises(RetentionError, match=r"40d.*30d"):
        declare_retention(PLATFORM, waiting="40d")
    with pytest.raises(RetentionError, match=r"8d.*7d"):
        declare_retention(PLATFORM, finished="8d")
    with pytest.raises(RetentionError, match="finished 5d is longer than the declared waiting 3d"):
        declare_retention(PLATFORM, waiting="3d", finished="5d")


def test_a_declaration_may_give_one_value() -> None:
    """An unset waiting is the platform's; an unset finished is the platform's capped at waiting."""
    only_finished = declare_retention(PLATFORM, finished="1d")
    assert waiting_horizon(PLATFORM, only_finished) == timedelta(days=30)
    assert finished_horizon(PLATFORM, only_finished) == timedelta(days=1)
    only_waiting = declare_retention(PLATFORM, waiting="3d")
    assert finished_horizon(PLATFORM, only_waiting) == timedelta(days=3)
    assert finished_horizon(PLATFORM, declare_retention(PLATFORM, waiting="20d")) == timedelta(
        days=7
    )
    assert finished_horizon(PLATFORM, None) == timedelta(days=7)


def test_the_platform_values_stay_every_threads_ceiling() -> None:
    """A value declared under a longer platform setting no longer outlives a lowered one."""
    declared = declare_retention(PLATFORM, waiting="20d", finished="5d")
    lowered = PLATFORM.update(
        waiting_retention=timedelta(days=10), finished_retention=timedelta(days=2)
    )
    assert waiting_horizon(lowered, declared) == timedelta(days=10)
    assert finished_horizon(lowered, declared) == timedelta(days=2)
    assert waiting_horizon(PLATFORM, declared) == timedelta(days=20)
    assert finished_horizon(PLATFORM, declared) == timedelta(days=5)


def test_mark_due_time_uses_the_retention_in_force_at_the_mark() -> None:
    """A mark's due time is fixed at the mark; a later settings change moves only new marks."""
    first = due_at(PLATFORM, None, NOW)
    later = PLATFORM.update(finished_retention=timedelta(days=1))
    assert first == NOW + timedelta(days=7)
    assert due_at(later, None, NOW) == NOW + timedelta(days=1)
    assert due_at(PLATFORM, Retention(finished=timedelta(hours=6)), NOW) == NOW + timedelta(hours=6)


def test_park_deadline_rules() -> None:
    """A park needs a deadline within the thread's waiting horizon, declared or platform."""
    check_park_deadline(PLATFORM, None, thread_id="t", now=NOW, deadline=NOW + timedelta(days=30))
    with pytest.raises(ParkRefused, match="no deadline"):
        check_park_deadline(PLATFORM, None, thread_id="t", now=NOW, deadline=None)
    with pytest.raises(ParkRefused, match="past the thread's waiting retention of 30d"):
        check_park_deadline(
            PLATFORM, None, thread_id="t", now=NOW, deadline=NOW + timedelta(days=30, seconds=1)
        )
    with pytest.raises(ParkRefused, match="2d"):
        check_park_deadline(
            PLATFORM,
            Retention(waiting=timedelta(days=2)),
            thread_id="t",
            now=NOW,
            deadline=NOW + timedelta(days=3),
        )
    with pytest.raises(ParkRefused, match="has no time zone"):
        check_park_deadline(PLATFORM, None, thread_id="t", now=NOW, deadline=datetime(2030, 1, 1))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Settings(waiting_retention=30), "a duration is text or a timedelta"),  # type: ignore[arg-type]
        (lambda: Settings(url=""), "give one such as sqlite:///durability.db"),
        (lambda: Settings().update(waiting=timedelta(days=1)), "no setting named 'waiting'"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(build: Any, message: str) -> None:
    """A wrong type, an empty URL or an unknown setting is a ConfigError, not a TypeError."""
    with pytest.raises(ConfigError, match=message):
        build()
