"""The analyses' sections of the static report (:func:`durability.report.write_report`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durability import analyses, simulate
from durability.analyses import charts
from durability.humanize import format_bytes
from durability.stores.base import Store


def add_sections(
    page: Any,
    store: Store,
    policies: list[simulate.Policy],
    at: datetime,
    *,
    size_limit: int | None = None,
    backtest_days: int = 28,
) -> None:
    """Add "Where the bytes are", "Restore readiness", "Growth forecast" and "Retention
    backtest" to ``page`` (the report's page). ``policies`` are the one in force, then the
    proposed one; ``size_limit`` the size the forecast dates (default: twice today's bytes)."""
    in_force, proposed = policies
    total = _where_bytes(page, store)
    _readiness(page, store)
    _forecast(page, store, policies, at, size_limit or max(2 * total, 1))
    _backtest(page, store, in_force, proposed, at, backtest_days)


def _where_bytes(page: Any, store: Store) -> int:
    """The "Where the bytes are" section; returns the store's bytes."""
    owners = analyses.bytes_by(store, "owner")
    keys = analyses.bytes_by_state_key(store)
    total = int(owners["size_bytes"].sum())
    s = page.section(
        "Where the bytes are",
        f"{format_bytes(total)} by owner, runner and node (every checkpoint's size, read from "
        f"the store's headers) and by top-level state key (estimated from a sample of "
        f"{keys.attrs['sampled']:,} of {keys.attrs['population']:,} checkpoints).",
    )
    runners, nodes = analyses.bytes_by(store, "runner"), analyses.bytes_by(store, "node")
    page.chart(s, charts.where_bytes(owners, runners, nodes, keys), "where_bytes", "bytes by owner")
    s.table(owners, "by owner")
    s.table(keys, "by top-level state key (a sample)")
    s.table(analyses.largest_threads(store, 10), "the largest threads")
    s.table(analyses.largest_checkpoints(store, 10), "the largest checkpoints")
    return total


def _readiness(page: Any, store: Store) -> None:
    ready = analyses.readiness(store)
    by_owner = analyses.readiness_by_owner(ready)
    s = page.section(
        "Restore readiness",
        "If this disk died now: what a restore from the plane would bring back of each thread "
        "(everything, its checkpoints up to the first one the plane lacks, or nothing).",
    )
    page.chart(s, charts.readiness_chart(by_owner), "readiness", "restore readiness by owner")
    s.table(by_owner, "by owner")
    s.table(
        ready[ready["restorable"] != "everything"], "threads a restore would not bring back whole"
    )


def _forecast(
    page: Any, store: Store, policies: list[simulate.Policy], at: datetime, limit: int
) -> None:
    frame = analyses.forecast(store, policies, now=at)
    crossings = analyses.crossing(frame, limit)
    said = "; ".join(
        f"{role} ({label}): " + (f"{day:%Y-%m-%d}" if day is not None else "not within 90 days")
        for (label, day), role in zip(crossings.items(), ("in force", "proposed"), strict=False)
    )
    s = page.section(
        "Growth forecast",
        f"Bytes and threads over the next 90 days if the store keeps writing as it did in the "
        f"last {frame.attrs['window']} days (by weekday), under the policy in force and the "
        f"proposed one. The day it holds {format_bytes(limit)}: {said}.",
    )
    page.chart(s, charts.forecast_chart(frame, limit), "forecast", "growth forecast")


def _backtest(
    page: Any,
    store: Store,
    in_force: simulate.Policy,
    proposed: simulate.Policy,
    at: datetime,
    days: int,
) -> None:
    result = analyses.backtest(store, proposed, in_force=in_force, days=days, now=at)
    cuts = result.cuts[result.cuts["policy"] == proposed.label]
    s = page.section(
        "Retention backtest",
        f"The last {days} days replayed, one sweep a day, under the policy in force and "
        f"{proposed.label}: the storage each would have held and the conversations each would "
        f"have cut between two turns ({len(cuts)} under the proposed one). Note: "
        f"{analyses.CAVEAT}.",
    )
    page.chart(s, charts.backtest_chart(result), "backtest", "retention backtest")
    s.table(cuts, "conversations the proposed policy would have cut")


__all__ = ["add_sections"]
