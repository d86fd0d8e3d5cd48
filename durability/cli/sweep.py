"""``durability sweep``: the checkpoint sweep (admin-only, destructive; preview with --dry-run)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from durability.cli._common import (
    friendly_errors,
    json_option,
    open_store,
    print_json,
    print_table,
    url_argument,
)
from durability.humanize import format_bytes


def _parse_now(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    from durability.clock import parse_aware

    if value is None:
        return None
    when = parse_aware(value)
    if when is None:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 time with an offset; write it like 2026-03-01T00:00:00+00:00"
        )
    return when


@click.command()
@url_argument
@click.option("--dry-run", is_flag=True, help="Show what the sweep would do; delete nothing.")
@click.option(
    "--now",
    metavar="ISO",
    default=None,
    callback=_parse_now,
    help="Sweep as of this time (ISO 8601 with an offset) instead of the clock's.",
)
@click.option(
    "--archive",
    metavar="DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="Write everything deleted to a gzip JSON Lines archive in DIR first.",
)
@json_option
def sweep(
    url: str, dry_run: bool, now: datetime | None, archive: str | None, as_json: bool
) -> None:
    """Admin only, destructive: delete the checkpoint threads of URL whose retention has passed.

    Finished threads whose due time has passed go on every provider; on postgres and sqlite,
    threads idle past their waiting retention go too (on redis the key TTL does that, on memory
    the process lifetime: both reported as skipped). A thread a live-thread filter claims (an
    unexpired park, a live lease, checkpoints the plane does not have yet) is spared. The
    retention values come from DURABILITY_WAITING_RETENTION and DURABILITY_FINISHED_RETENTION.

    Nothing runs the sweep in the background: run this from cron or a scheduler. Preview with
    --dry-run, which uses the same selection and filters and deletes nothing. With --archive
    DIR, what is deleted is first written to DIR and flushed (read it back with
    archive:///DIR). A LangGraph store is swept in place when its URL says ?writable=true.
    """
    from durability.sweep import plan_sweep
    from durability.sweep import sweep as run_sweep

    with friendly_errors(), open_store(url) as store:
        if dry_run:
            plan = plan_sweep(store, now=now)
        else:
            result = run_sweep(
                store, now=now, progress=not as_json and sys.stderr.isatty(), archive=archive
            ).to_dict()
        where = repr(store)
    if dry_run:
        _show_plan(plan, where, as_json)
    elif as_json:
        print_json({"dry_run": False, **result})
    else:
        _show_result(result, where)


def _show_plan(plan: Any, where: str, as_json: bool) -> None:
    from dataclasses import asdict

    summary = plan.summary()
    if as_json:
        print_json(
            {
                "dry_run": True,
                "now": plan.now,
                "provider": plan.provider,
                "summary": summary,
                "rows": [asdict(r) for r in plan.rows],
            }
        )
        return
    total = summary["total_delete"]
    click.echo(
        f"dry run of the sweep of {where} at {plan.now.isoformat()}: it would delete "
        f"{total['threads']} threads ({total['checkpoints']} checkpoints, {format_bytes(total['size_bytes'])}); "
        "nothing was deleted"
    )
    for note in summary["notes"]:
        click.echo(f"note: {note}")
    counts, going = summary["counts"], summary["delete"]
    print_table(
        ["horizon", "delete", "checkpoints", "bytes", "spared", "not due", "skipped"],
        [
            (
                h,
                counts[h]["delete"],
                going[h]["checkpoints"],
                format_bytes(going[h]["size_bytes"]),
                counts[h]["spared"],
                counts[h]["not_due"],
                counts[h]["skipped"],
            )
            for h in counts
        ],
    )
    acting = [r for r in plan.rows if r.action in ("delete", "spared")]
    if acting:
        click.echo("")
        print_table(
            ["thread", "horizon", "action", "due", "checkpoints", "reason"],
            [(r.thread_id, r.horizon, r.action, r.due_at, r.checkpoints, r.reason) for r in acting],
        )


def _show_result(result: dict[str, Any], where: str) -> None:
    totals = result["totals"]
    click.echo(
        f"swept {where} at {result['now']}: deleted {totals['threads']} threads "
        f"({totals['checkpoints']} checkpoints, {totals['writes']} pending writes), "
        f"spared {totals['spared']}"
    )
    deleted, spared, skipped = result["deleted"], result["spared"], result["skipped"]
    print_table(
        ["horizon", "deleted", "checkpoints", "writes", "spared", "not due", "skipped"],
        [
            (
                h,
                deleted[h]["threads"],
                deleted[h]["checkpoints"],
                deleted[h]["writes"],
                len(spared[h]),
                result["not_due"][h],
                skipped[h]["threads"] if skipped[h] else "-",
            )
            for h in deleted
        ],
    )
    for h, entry in skipped.items():
        if entry:
            click.echo(f"{h}: {entry['threads']} threads {entry['reason']}")
    rows = [(s["thread_id"], h, s["owner"], s["reason"]) for h in spared for s in spared[h]]
    if rows:
        click.echo("")
        print_table(["spared thread", "horizon", "by", "reason"], rows)
