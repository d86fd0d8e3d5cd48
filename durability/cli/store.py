"""``durability store reset``."""

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
