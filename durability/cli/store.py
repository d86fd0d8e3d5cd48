"""``durability store reset`` and ``durability store migrate``."""

from __future__ import annotations

import click

from durability.cli._common import (
    friendly_errors,
    json_option,
    open_store,
    print_json,
    url_argument,
)


def register(cli: click.Group) -> None:
    """Add the ``store`` group."""
    cli.add_command(store)


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
