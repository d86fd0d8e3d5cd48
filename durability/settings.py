"""The deployment's settings and the retention rules.

Two platform values bound how long checkpoint threads live:

* ``waiting_retention`` (``DURABILITY_WAITING_RETENTION``, default 30 days): how long a thread
  someone may still continue (a parked run, an open conversation, any thread nobody marked
  finished) lives after its newest checkpoint.
* ``finished_retention`` (``DURABILITY_FINISHED_RETENTION``, default 7 days): how long a thread
  lives after its owner marked it finished.

A thread's owner may declare shorter values for the threads it starts, never longer ones. The
rules are pure functions here, called by every store, the runner and the sweep.

"Boot" and "settings write" are every construction or update of :class:`Settings`: each refuses
the removed legacy variables, naming them and what replaced them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from durability.errors import ConfigError, ParkRefused, RetentionError

DEFAULT_URL = "sqlite:///durability.db"
DEFAULT_WAITING = timedelta(days=30)
DEFAULT_FINISHED = timedelta(days=7)

ENV_URL = "DURABILITY_URL"
ENV_WAITING = "DURABILITY_WAITING_RETENTION"
ENV_FINISHED = "DURABILITY_FINISHED_RETENTION"

#: Legacy variables that are no longer read, and what took their place.
REMOVED_VARIABLES: Mapping[str, str] = {
    "LLM_PROVIDER_CHECKPOINT_TTL_MINUTES": (
        f"{ENV_WAITING} and {ENV_FINISHED} (the two retention horizons)"
    ),
    "FLOW_CHECKPOINT_RETENTION_DAYS": (
        f"{ENV_WAITING} and {ENV_FINISHED}, applied by `durability sweep`"
    ),
}


def refuse_removed_variables(environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` when a removed legacy variable is set."""
    env = os.environ if environ is None else environ
    found = [name for name in REMOVED_VARIABLES if name in env]
    if found:
        lines = "; ".join(f"{name} is replaced by {REMOVED_VARIABLES[name]}" for name in found)
        raise ConfigError(
            f"refusing to start: the removed setting {', '.join(found)} is still set ({lines}). "
            "Unset it and set the replacement instead."
        )


_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_SHORT = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_SHORT_ALL = re.compile(r"(?:\d+(?:\.\d+)?[wdhms])+")
_ISO = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def parse_duration(text: str | timedelta, *, name: str = "duration") -> timedelta:
    """Parse ``30d``, ``12h``, ``1d12h``, ``90m``, ``2w`` or ISO 8601 (``P30D``, ``PT12H``).

    The result must be positive. ``name`` is the setting being parsed, used in the message.
    """
    if isinstance(text, timedelta):
        value = text
    elif not isinstance(text, str):
        raise ConfigError(
            f"cannot read {name}={str(text)[:80]!r}: a duration is text or a timedelta; "
            "write it like 30d, 12h, 1d12h, 90m or ISO 8601 (P30D, PT12H)"
        )
    else:
        raw = text.strip()
        seconds = _parse_seconds(raw)
        if seconds is None:
            raise ConfigError(
                f"cannot read {name}={text[:80]!r}: not a duration; "
                "write it like 30d, 12h, 1d12h, 90m or ISO 8601 (P30D, PT12H)"
            )
        try:
            value = timedelta(seconds=seconds)
        except OverflowError:
            raise ConfigError(
                f"cannot use {name}={text[:80]!r}: it is longer than any time this library "
                "can hold (timedelta's 999999999 days); give a shorter duration"
            ) from None
    if value <= timedelta(0):
        raise ConfigError(f"cannot use {name}={format_duration(value)}: it must be longer than 0")
    return value


def _parse_seconds(raw: str) -> float | None:
    lowered = raw.lower()
    if lowered and _SHORT_ALL.fullmatch(lowered):
        return sum(float(n) * _UNITS[u] for n, u in _SHORT.findall(lowered))
    iso = _ISO.fullmatch(raw.upper())
    if iso and raw.upper() not in ("P", "PT") and any(iso.groupdict().values()):
        return sum(float(v) * _UNITS[k] for k, v in iso.groupdict().items() if v)
    return None


def format_duration(value: timedelta) -> str:
    """A short human form: ``30d``, ``1d12h``, ``90s``; what :func:`parse_duration` reads back."""
    total = int(value.total_seconds())
    if total <= 0 or total != value.total_seconds():
        return f"{value.total_seconds():g}s"
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Settings:
    """The deployment's store URL and its two platform retention values.

    Build it from the environment with :meth:`from_env`; change it with :meth:`update`.
    Constructing or updating it refuses the removed legacy variables.
    """

    url: str = DEFAULT_URL
    waiting_retention: timedelta = DEFAULT_WAITING
    finished_retention: timedelta = DEFAULT_FINISHED

    def __post_init__(self) -> None:
        refuse_removed_variables()
        if not isinstance(self.url, str) or not self.url.strip():
            raise ConfigError(
                f"cannot use the store URL {self.url!r}: give one such as {DEFAULT_URL}"
            )
        object.__setattr__(
            self, "waiting_retention", parse_duration(self.waiting_retention, name=ENV_WAITING)
        )
        object.__setattr__(
            self, "finished_retention", parse_duration(self.finished_retention, name=ENV_FINISHED)
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``DURABILITY_URL`` and the two retention variables; ``overrides`` win."""
        env = os.environ if environ is None else environ
        refuse_removed_variables(env)
        values: dict[str, Any] = {
            "url": env.get(ENV_URL, "").strip() or DEFAULT_URL,
            "waiting_retention": parse_duration(
                env.get(ENV_WAITING, "").strip() or "30d", name=ENV_WAITING
            ),
            "finished_retention": parse_duration(
                env.get(ENV_FINISHED, "").strip() or "7d", name=ENV_FINISHED
            ),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def update(self, **changes: Any) -> Settings:
        """A settings write: a copy with ``changes``, checked like a fresh construction."""
        unknown = sorted(set(changes) - set(self.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"cannot update the settings: no setting named {', '.join(map(repr, unknown))}; "
                f"the settings are {', '.join(self.__dataclass_fields__)}"
            )
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Retention:
    """A thread's declared retention: either value may be ``None`` (the platform's applies)."""

    waiting: timedelta | None = None
    finished: timedelta | None = None


def declare_retention(
    settings: Settings,
    *,
    waiting: str | timedelta | None = None,
    finished: str | timedelta | None = None,
) -> Retention:
    """Validate a thread owner's declared retention against the platform values.

    The rule of a thread's own retention: a declared value may only shorten its horizon; one
    above the platform's value is refused naming both values, never shortened silently; a
    declared finished retention longer than the declared waiting one is refused too. Either
    value may be omitted.
    """
    declared_waiting = (
        None if waiting is None else parse_duration(waiting, name="declared waiting retention")
    )
    declared_finished = (
        None if finished is None else parse_duration(finished, name="declared finished retention")
    )
    if declared_waiting is not None and declared_waiting > settings.waiting_retention:
        raise RetentionError(
            f"refusing the declared waiting retention {format_duration(declared_waiting)}: it is "
            f"longer than the platform's waiting retention {format_duration(settings.waiting_retention)} "
            f"({ENV_WAITING}); declare at most {format_duration(settings.waiting_retention)}"
        )
    if declared_finished is not None and declared_finished > settings.finished_retention:
        raise RetentionError(
            f"refusing the declared finished retention {format_duration(declared_finished)}: it is "
            f"longer than the platform's finished retention {format_duration(settings.finished_retention)} "
            f"({ENV_FINISHED}); declare at most {format_duration(settings.finished_retention)}"
        )
    if (
        declared_waiting is not None
        and declared_finished is not None
        and declared_finished > declared_waiting
    ):
        raise RetentionError(
            f"refusing the declared retention: finished {format_duration(declared_finished)} is longer "
            f"than the declared waiting {format_duration(declared_waiting)}; declare a finished "
            "retention no longer than the waiting one"
        )
    return Retention(waiting=declared_waiting, finished=declared_finished)


def waiting_horizon(settings: Settings, declared: Retention | None = None) -> timedelta:
    """How long a waiting thread lives after its newest checkpoint: declared, else the platform's.

    The platform's value is also every thread's ceiling: a value declared under a
    longer platform setting that has since been lowered no longer outlives the platform's.
    """
    if declared is not None and declared.waiting is not None:
        return min(declared.waiting, settings.waiting_retention)
    return settings.waiting_retention


def finished_horizon(settings: Settings, declared: Retention | None = None) -> timedelta:
    """How long a finished thread lives after its mark.

    The declared finished value, else the platform's finished retention capped at the
    thread's waiting horizon; never longer than the platform's finished retention (its ceiling).
    """
    if declared is not None and declared.finished is not None:
        return min(declared.finished, settings.finished_retention)
    return min(settings.finished_retention, waiting_horizon(settings, declared))


def due_at(settings: Settings, declared: Retention | None, marked_at: datetime) -> datetime:
    """When a thread marked finished at ``marked_at`` becomes due for the sweep.

    Fixed at the mark from the retention in force then: changing the finished value later
    moves only new marks.
    """
    return marked_at + finished_horizon(settings, declared)


def check_park_deadline(
    settings: Settings,
    declared: Retention | None,
    *,
    thread_id: str,
    now: datetime,
    deadline: datetime | None,
) -> None:
    """Refuse a park with no deadline, or one past the thread's waiting horizon: an ask must
    carry a deadline its thread's waiting retention can keep."""
    horizon = waiting_horizon(settings, declared)
    if deadline is None:
        raise ParkRefused(
            f"refusing to park thread {thread_id!r}: the ask has no deadline; give it a deadline "
            f"within the thread's waiting retention ({format_duration(horizon)} from now)"
        )
    if deadline.tzinfo is None or deadline.utcoffset() is None:
        raise ParkRefused(
            f"refusing to park thread {thread_id!r}: its deadline {deadline.isoformat()} has no "
            "time zone; give an aware datetime (for example with tzinfo=timezone.utc)"
        )
    if deadline > now + horizon:
        raise ParkRefused(
            f"refusing to park thread {thread_id!r}: its deadline {deadline.isoformat()} is past the "
            f"thread's waiting retention of {format_duration(horizon)} (until "
            f"{(now + horizon).isoformat()}); shorten the deadline"
        )
