"""``durability copy SRC DST``: copy threads between stores (plan first, then copy)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from durability.cli._common import friendly_errors, json_option, print_json, print_table


def _parse_since(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> datetime | None:
    from durability.clock import parse_aware

    if value is None:
        return None
    when = parse_aware(value if "T" in value or " " in value else f"{value}T00:00:00+00:00")
    if when is None:
        raise click.BadParameter(
            f"{value!r} is not a date or an ISO 8601 time; write it like 2026-03-01 or "
            "2026-03-01T12:00:00+00:00"
        )
    return when


@click.command()
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@click.option("--thread", "threads", multiple=True, help="Copy this thread (repeatable).")
@click.option("--since", callback=_parse_since, help="Threads written on or after this date.")
@click.option("--owner", default=None, help="Threads whose ledger names this owner.")
@click.option("--rename", default=None, help="Copy under new ids, e.g. '{thread_id}-copy'.")
@click.option(
    "--lossy",
    is_flag=True,
    help="Into a LangGraph store: drop what its tables have no place for (the plan names it).",
)
@click.option("--dry-run", is_flag=True, help="Show the plan; copy nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before copying.")
@json_option
def copy(
    source: str,
    destination: str,
    threads: tuple[str, ...],
    since: datetime | None,
    owner: str | None,
    rename: str | None,
    lossy: bool,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Copy threads from the store SRC into the durability store DST, ids and order kept.

    SRC is any store URL (durability, langgraph+…, fastaiagent+…, archive:///DIR); DST a
    durability store, or a LangGraph store opened ?writable=true (written through LangGraph's
    own saver). The plan is shown first: per thread copy, resume (an earlier copy was cut
    short), skip (already copied) or refuse (DST holds other checkpoints under that id: nothing
    is copied unless --rename; or LangGraph's tables have no place for part of the thread:
    nothing is copied unless --lossy drops it). Run it again after a kill to finish the copy.
    """
    import durability
    from durability.transfer import copy as run_copy
    from durability.transfer import plan_copy

    options: dict[str, Any] = {
        "threads": list(threads) or None,
        "since": since,
        "owner": owner,
        "rename": rename,
        "lossy": lossy,
    }
    with friendly_errors(), durability.open(source) as src, durability.open(destination) as dst:
        plan = plan_copy(src, dst, **options)
        if dry_run or not as_json:
            _show(plan, as_json)
        if dry_run:
            return
        if not yes and not as_json:
            click.confirm("Copy?", abort=True)
        result = run_copy(
            src,
            dst,
            **options,
            progress=not as_json and sys.stderr.isatty(),
        )
    if as_json:
        print_json({"dry_run": False, **result.to_dict()})
    else:
        click.echo(f"copied {result.checkpoints} checkpoints and {result.writes} pending writes")


def _show(plan: object, as_json: bool) -> None:
    from dataclasses import asdict

    summary = plan.summary()  # type: ignore[attr-defined]
    rows = plan.rows  # type: ignore[attr-defined]
    if as_json:
        print_json({"dry_run": True, **summary, "rows": [asdict(r) for r in rows]})
        return
    counts = summary["counts"]
    click.echo(
        f"copy from {summary['source']} into {summary['destination']}: "
        f"{summary['checkpoints']} checkpoints to write; "
        + ", ".join(f"{n} to {a}" for a, n in counts.items())
    )
    print_table(
        ["thread", "into", "action", "checkpoints", "present", "reason"],
        [(r.thread_id, r.target, r.action, r.checkpoints, r.present, r.reason) for r in rows],
    )
