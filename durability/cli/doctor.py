"""``durability doctor``: check every invariant a store relies on, and name each break."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from durability.cli._common import (
    Duration,
    friendly_errors,
    json_option,
    open_store,
    print_json,
    url_argument,
)


def register(cli: click.Group) -> None:
    """Add the ``doctor`` command."""
    cli.add_command(doctor)


@click.command()
@url_argument
@click.option(
    "--grace",
    type=Duration(),
    default=30.0,
    show_default=True,
    help="Seconds a run's ledger entry may wait for its first checkpoint (the lease TTL).",
)
@click.option(
    "--overdue",
    type=Duration(),
    default=86400.0,
    show_default=True,
    help="Seconds past due a finished mark may wait for the sweep before it is reported.",
)
@json_option
def doctor(url: str, grace: float, overdue: float, as_json: bool) -> None:
    """Check that the store at URL is whole; exit 1 if anything is broken.

    Reads only. Findings of severity info (the sweep's pending work: marks past due, parks
    past their deadline) are listed but do not make the store broken. Each problem names its check, its severity (error, warning, info), the
    thread, how many rows, what is wrong and the command that fixes it. The checks and what
    each means are listed in the guide (docs/guides/doctor.md).
    """
    from durability.doctor import diagnose

    options: dict[str, Any] = {}
    if url.split("://", 1)[0].lower().startswith("redis"):
        options["reconcile"] = False  # opening must not repair the indexes the doctor checks
    with friendly_errors(), open_store(url, **options) as store:
        diagnosis = diagnose(
            store, grace=timedelta(seconds=grace), overdue=timedelta(seconds=overdue)
        )
    if as_json:
        print_json(diagnosis.to_dict())
    else:
        _show(diagnosis)
    if not diagnosis.clean:
        raise SystemExit(1)


def _show(diagnosis: Any) -> None:
    ran = f"{len(diagnosis.checks)} checks ({len(diagnosis.skipped)} do not apply)"
    if not diagnosis.problems:
        click.echo(f"{diagnosis.store} is whole: {ran} found nothing")
        return
    counts = ", ".join(f"{n} {s}" for s, n in diagnosis.counts().items() if n)
    verdict = "is whole" if diagnosis.clean else "is broken"
    click.echo(f"{diagnosis.store} {verdict}: {ran} found {len(diagnosis.problems)} ({counts})")
    for p in diagnosis.problems:
        thread = f" thread {p.thread_id!r}" if p.thread_id is not None else ""
        click.echo(f"\n{p.severity.upper()} {p.check}{thread} ({p.rows} rows): {p.detail}")
        click.echo(f"  fix: {p.fix}" if p.fix else "  fix: none (report only)")
