"""``durability keys new``: a fresh customer key line for ``DURABILITY_ENCRYPTION_KEYS``."""

from __future__ import annotations

import click

from durability.cli._common import friendly_errors
from durability.crypto.keyring import ENV_KEYS, new_key_line


@click.group()
def keys() -> None:
    """Make the customer keys that encrypt checkpoint state."""


@keys.command("new")
@click.option("--id", "key_id", default=None, help="The key id (default: k<date>-<random>).")
def new(key_id: str | None) -> None:
    """Print a fresh key line, keyid:BASE64KEY (32 random bytes).

    Put it first in DURABILITY_ENCRYPTION_KEYS (comma-separated; the first key is current) to
    encrypt new writes under it; keep the older keys listed after it until
    `durability store reencrypt` has moved every row. The line is printed on stdout only; keep it
    in your secret store, never in a log.
    """
    with friendly_errors():
        line = new_key_line(key_id)
    click.echo(line)
    click.echo(f"# put it first in {ENV_KEYS}", err=True)
