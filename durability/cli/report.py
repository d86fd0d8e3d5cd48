"""``durability report``: the notebooks' charts and tables as a static HTML page."""

from __future__ import annotations

from pathlib import Path

import click

from durability.cli._common import (
    ENV_PLANE_KEY,
    ENV_PLANE_URL,
    friendly_errors,
    open_store,
    out_option,
    url_argument,
)


@click.command()
@url_argument
@out_option("durability-out/report", "Folder for index.html and its charts (PNG).")
@click.option("--now", default=None, help="The sweep's 'now' (ISO 8601); default: now.")
@click.option(
    "--proposed-waiting",
    default="7d",
    show_default=True,
    help="A shorter waiting retention to compare.",
)
@click.option(
    "--proposed-finished",
    default="2d",
    show_default=True,
    help="A shorter finished retention to compare.",
)
@click.option(
    "--outage-length",
    default="2d",
    show_default=True,
    help="A plane outage to simulate over the recorded writes.",
)
@click.option(
    "--drain-rate",
    type=float,
    default=0.05,
    show_default=True,
    help="Rows per second the outbox sends once the simulated outage ends.",
)
@click.option(
    "--plane",
    default=None,
    envvar=ENV_PLANE_URL,
    help=f"Add the plane's run health (key from {ENV_PLANE_KEY}).",
)
@click.option(
    "--size-limit",
    default=None,
    help="The store size whose crossing the growth forecast dates (bytes, or 512MiB, 2GiB…); "
    "default: twice today's.",
)
def report(
    url: str,
    out: Path,
    now: str | None,
    proposed_waiting: str,
    proposed_finished: str,
    outage_length: str,
    drain_rate: float,
    plane: str | None,
    size_limit: str | None,
) -> None:
    """Write the notebooks' charts and tables for the store at URL as OUT/index.html.

    Threads and their owners, run health, what reached the plane and what is stuck (quarantined
    rows with the plane's reason, the backlog over time and under a simulated plane outage),
    what the next sweep deletes and why, and what the proposed shorter retention would cost;
    where the bytes are, what a restore from the plane would bring back now, the growth
    forecast and the retention backtest. Reads only.
    """
    import os

    from durability.clock import parse_aware
    from durability.humanize import parse_size
    from durability.report import write_report

    with friendly_errors(), open_store(url) as store:
        client = None
        if plane:
            from durability.replication import PlaneClient

            key = os.environ.get(ENV_PLANE_KEY, "")
            if not key:
                raise click.ClickException(
                    f"cannot read the plane {plane}: set {ENV_PLANE_KEY} to its API key"
                )
            client = PlaneClient(plane, key)
        path = write_report(
            store,
            out,
            now=parse_aware(now) if now else None,
            proposed_waiting=proposed_waiting,
            proposed_finished=proposed_finished,
            plane=client,
            outage_length=outage_length,
            drain_rate=drain_rate,
            size_limit=parse_size(size_limit, name="--size-limit") if size_limit else None,
        )
    click.echo(f"report: {path.resolve()}")
