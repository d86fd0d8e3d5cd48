"""``durability store reset|migrate|thin|compact|reencrypt``."""

from __future__ import annotations

from typing import Any

import click

from durability.cli._common import (
    friendly_errors,
    json_option,
    open_store,
    print_json,
    url_argument,
)


@click.group()
def store() -> None:
    """Manage a checkpoint store as a whole."""


@store.command("reset")
@url_argument
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def reset(url: str, yes: bool, as_json: bool) -> None:
    """Delete everything in the store at URL and record this version's format generation.

    This is what a store written by another format generation needs before this version can
    use it (a store is refused until then). It cannot be undone.
    """
    with friendly_errors(), open_store(url) as opened:
        if not yes:
            click.confirm(
                f"Delete every checkpoint, write, park and ledger record in {opened!r}?", abort=True
            )
        opened.reset()
        from durability.stores.base import FORMAT_GENERATION

    if as_json:
        print_json({"url": repr(opened), "format_generation": FORMAT_GENERATION})
    else:
        click.echo(f"reset {opened!r}: empty, format generation {FORMAT_GENERATION}")


@store.command("migrate")
@url_argument
@click.option("--plan", "plan_only", is_flag=True, help="Show what would run; change nothing.")
@json_option
def migrate(url: str, plan_only: bool, as_json: bool) -> None:
    """Apply the pending schema migrations of the store at URL, a table rewrite included.

    Shows its plan first (each pending version, whether it rewrites the checkpoints table and
    how many rows that copies), then copies the rows in batches, one transaction each, printing
    its progress: a migration stopped half-way resumes where it stopped when run again. A
    store that needs a rewrite refuses to open until this has run. Stores without a SQL
    schema (memory, Redis) have nothing to migrate.
    """
    from durability.stores.sql import SQLStore

    with friendly_errors(), open_store(url) as opened:
        if not isinstance(opened, SQLStore):
            if as_json:
                print_json({"url": repr(opened), "pending": []})
            else:
                click.echo(f"{opened!r} has no SQL schema: nothing to migrate")
            return
        plan = opened.migration_plan()
        steps = [{"version": v, "name": n, "rewrites_table": r} for v, n, r in plan.steps]
        if not as_json:
            click.echo(f"{opened!r}: {len(steps)} pending migration(s)")
            for step in steps:
                rewrite = f" (rewrites {plan.rows:,} rows)" if step["rewrites_table"] else ""
                click.echo(f"  {step['version']}: {step['name']}{rewrite}")
        if plan_only or not steps:
            if as_json:
                print_json({"url": repr(opened), "pending": steps, "rows": plan.rows})
            return

        def progress(done: int, total: int) -> None:
            click.echo(f"copied {done:,} of {total:,} rows", err=True)

        opened.upgrade(progress)
        applied = opened.applied_migrations()
    if as_json:
        print_json(
            {"url": repr(opened), "applied": [s["version"] for s in steps], "now": applied[-1]}
        )
    else:
        click.echo(f"migrated {opened!r} to schema version {applied[-1]}")


@store.command("thin")
@url_argument
@click.option("--keep-latest", type=int, default=None, help="Keep this many per namespace.")
@click.option("--newer-than", default=None, help="Keep checkpoints from this date on (ISO).")
@click.option("--due-only", is_flag=True, help="Only threads the sweep would delete now.")
@click.option("--dry-run", is_flag=True, help="Show the plan; drop nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before dropping.")
@json_option
def thin_store(
    url: str,
    keep_latest: int | None,
    newer_than: str | None,
    due_only: bool,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Drop threads' older checkpoints, keeping each resumable (keep the latest N, or newer).

    What a resume needs is never dropped (each namespace's newest checkpoint, the step before a
    run end, a park, rows the plane lacks); threads with LangGraph delta channels are refused.
    --due-only thins instead of deleting the threads the sweep would delete. A LangGraph store
    needs ?writable=true. The space becomes reusable; `durability store compact` gives it back.
    """
    from durability.clock import parse_aware
    from durability.sweep.thin import plan_thin, thin

    since = None
    if newer_than is not None:
        since = parse_aware(newer_than if "T" in newer_than else f"{newer_than}T00:00:00+00:00")
        if since is None:
            raise click.BadParameter(f"{newer_than!r} is not a date; write it like 2026-03-01")
    options = {"keep_latest": keep_latest, "newer_than": since, "due_only": due_only}
    with friendly_errors(), open_store(url) as opened:
        plan = plan_thin(opened, **options)  # type: ignore[arg-type]
        summary = plan.summary()
        if dry_run or not as_json:
            _show_thin(summary, as_json and dry_run)
        if dry_run:
            return
        if not yes and not as_json:
            click.confirm(f"Drop {summary['checkpoints']} checkpoints?", abort=True)
        result = thin(opened, **options)  # type: ignore[arg-type]
    if as_json:
        print_json({"dry_run": False, **result.to_dict()})
    else:
        click.echo(f"dropped {result.checkpoints} checkpoints from {len(result.removed)} threads")


def _show_thin(summary: dict[str, object], as_json: bool) -> None:
    if as_json:
        print_json({"dry_run": True, **summary})
        return
    click.echo(
        f"thinning drops {summary['checkpoints']} checkpoints ({summary['size_bytes']} bytes); "
        f"threads: {summary['counts']}"
    )


@store.command("compact")
@url_argument
@json_option
def compact_store(url: str, as_json: bool) -> None:
    """Give the disk back after deletes: SQLite VACUUM (needs exclusive access: stop the
    writers first), Postgres VACUUM (ANALYZE) online (VACUUM FULL is left to you: it locks)."""
    from dataclasses import asdict

    from durability.stores.compact import compact

    with friendly_errors(), open_store(url) as opened:
        done = compact(opened)
    if as_json:
        print_json(asdict(done))
    else:
        click.echo(f"compacted {done.url}: {done.before} -> {done.after} bytes; {done.note}")


@store.command("reencrypt")
@url_argument
@click.option(
    "--dry-run", is_flag=True, help="Show the plan (rows and bytes per key id); change nothing."
)
@click.option("--batch", default=1000, show_default=True, help="Rows re-sealed per transaction.")
@click.option(
    "--cap-bytes",
    default=1_048_576,
    show_default=True,
    help="The plane's state_snapshot cap: rows that would cross it are listed.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def reencrypt(
    url: str, dry_run: bool, batch: int, cap_bytes: int, yes: bool, as_json: bool
) -> None:
    """Re-seal every checkpoint state under the current key (the first in
    DURABILITY_ENCRYPTION_KEYS), and seal the rows still held in clear.

    Keep the older keys listed after the current one: rows are opened with them. Safe to kill
    at any moment (every row stays readable by its old key or the new one) and to run again (it
    resumes with the rows left). Pending writes and the plane's copies keep their key.
    """
    from durability.crypto.reencrypt import apply_reencrypt, plan_reencrypt

    with friendly_errors(), open_store(url) as opened:
        plan = plan_reencrypt(opened, cap_bytes=cap_bytes)
        if dry_run or plan.empty:
            _show_plan(plan.to_json(), as_json)
            return
        if not as_json:
            _show_plan(plan.to_json(), as_json=False)
        if not yes:
            click.confirm(f"Re-seal {plan.rows} rows under key {plan.current_key!r}?", abort=True)
        report = apply_reencrypt(opened, plan, batch=batch, progress=_progress)
        click.echo("", err=True)
    result = {"plan": plan.to_json(), "rows": report.rows, "bytes": report.bytes,
              "seconds": round(report.seconds, 3), "rows_per_second": round(report.rows_per_second)}  # fmt: skip
    if as_json:
        print_json(result)
    else:
        click.echo(
            f"re-sealed {report.rows} rows ({report.bytes} bytes) under {plan.current_key!r} in "
            f"{report.seconds:.1f} s ({report.rows_per_second:,.0f} rows/s)"
        )


def _progress(done: int, total: int) -> None:
    click.echo(f"\rre-encrypting: {done}/{total} rows", err=True, nl=False)


def _show_plan(plan: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json({"plan": plan})
        return
    click.echo(f"{plan['url']}: current key {plan['current_key']!r}")
    for k in plan["by_key"]:
        name = "clear" if k["key_id"] is None else repr(k["key_id"])
        flag = " (current)" if k["current"] else "" if k["known"] else " (NOT IN THE KEYRING)"
        click.echo(f"  {name:>20}: {k['rows']:>10} rows {k['bytes']:>14} bytes{flag}")
    click.echo(f"to re-seal: {plan['rows_to_change']} rows in {plan['threads_to_change']} threads")
    if plan["over_cap"]:
        click.echo(
            f"would cross the plane's {plan['cap_bytes']}-byte cap: {len(plan['over_cap'])} rows"
        )


@store.command("encryption")
@url_argument
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    help="Estimate from the envelopes of about N checkpoints picked at random (default: every row).",
)
@json_option
def encryption(url: str, sample: int | None, as_json: bool) -> None:
    """Show how much of the store's checkpoint state is encrypted, and under which keys.

    Rows and bytes per key id, each with its status against the keyring in
    DURABILITY_ENCRYPTION_KEYS: current, older (listed, retired: `durability store reencrypt`
    moves them), missing (not in the keyring) or clear. Reads the envelopes' clear headers only:
    no key is needed, and no key is shown. Every row is read unless --sample N is given: then
    the counts are scaled from about N rows picked at random, and the output says so.
    """
    from durability.crypto.coverage import coverage

    with friendly_errors(), open_store(url) as opened:
        found = coverage(opened, sample=sample)
    if as_json:
        print_json(found.to_json())
        return
    click.echo(
        f"{found.url}: {found.percent_encrypted:.1f} % of {found.rows} rows encrypted; "
        f"{found.clear_rows} clear, {found.retired_rows} under retired or missing keys"
        + ("" if found.encrypting else " (opened without a keyring)")
        + ("" if found.sampled is None else f" (estimated from {found.sampled} rows)")
    )
    for k in found.by_key:
        name = "(clear)" if k.key_id is None else k.key_id
        click.echo(f"  {name:>20}  {k.status:<8} {k.rows:>10} rows {k.bytes:>14} bytes")
