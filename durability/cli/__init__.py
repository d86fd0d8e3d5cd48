"""The ``durability`` command line: ``durability <noun> <verb>``.

Each noun lives in its own module; its group or command is added below. Every command has
``--help``; commands whose output is data take ``--json``.
"""

from __future__ import annotations

import click

from durability._extras import missing_extra
from durability._version import __version__
from durability.cli import (
    copy,
    demo,
    doctor,
    keys,
    lab,
    ops,
    outbox,
    plane,
    report,
    restore,
    runs,
    store,
    sweep,
    threads,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="durability")
def cli() -> None:
    """Inspect, replicate, restore and sweep agent and workflow checkpoint stores.

    A store is named by URL: sqlite:///path.db (the embedded default), memory://,
    postgresql+psycopg://user@host/db, redis://host:6379/0. DURABILITY_URL sets the default.
    """


for command in (
    demo.demo,
    lab.lab,
    report.report,
    store.store,
    threads.threads,
    copy.copy,
    runs.runs,
    runs.resume,
    restore.restore,
    outbox.outbox,
    plane.plane,
    sweep.sweep,
    ops.serve_ops,
    keys.keys,
    doctor.doctor,
):
    cli.add_command(command)


def main() -> None:
    """Entry point of the ``durability`` script; a command whose extra is not installed says
    which one to install instead of showing a traceback."""
    try:
        cli(prog_name="durability")
    except ModuleNotFoundError as exc:
        refusal = missing_extra(exc, "this command")
        if refusal is exc:
            raise
        click.echo(f"Error: {refusal}", err=True)
        raise SystemExit(1) from None
