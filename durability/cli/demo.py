"""``durability demo``: write a demo store of real checkpoints and show what is in it."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import click

from durability.cli._common import friendly_errors, json_option, print_json, print_table


def register(cli: click.Group) -> None:
    """Add the ``demo`` command."""
    cli.add_command(demo)


@click.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("durability-out"),
    show_default=True,
    help="Folder for the demo store.",
)
@json_option
def demo(out: Path, as_json: bool) -> None:
    """Build a demo store on the embedded SQLite default and print what is in it."""
    import durability
    from durability.clock import FrozenClock
    from durability.demo import DEMO_START, build_demo
    from durability.runs import list_runs

    out.mkdir(parents=True, exist_ok=True)
    path = out / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    clock = FrozenClock(DEMO_START)
    with friendly_errors(), durability.open(url, clock=clock, single_worker=True) as store:
        runs_log = logging.getLogger("durability.runs")
        level = runs_log.level
        runs_log.setLevel(logging.ERROR)  # the demo's failed runs fail on purpose
        try:
            build_demo(store, clock)
        finally:
            runs_log.setLevel(level)
        records = list(store.iter_threads())
        parks = store.parks()
        statuses = Counter(r.status for r in list_runs(store))
    if as_json:
        print_json(
            {"url": url, "threads": len(records), "parks": len(parks), "runs": dict(statuses)}
        )
        return
    click.echo(f"demo store: {url}")
    print_table(
        ["thread", "checkpoints", "bytes", "newest", "owner", "finished", "due"],
        [
            (
                r.thread_id,
                r.checkpoints,
                r.size_bytes,
                r.newest_at,
                r.owner,
                r.finished_at,
                r.due_at,
            )
            for r in records
        ],
    )
    click.echo(
        f"\n{len(records)} threads, {sum(r.checkpoints for r in records)} checkpoints, {len(parks)} parked runs"
    )
    click.echo(
        "runs: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    )
    click.echo(f"explore it: durability runs {url}")
    if parks:
        click.echo(
            f"answer a parked run: durability resume {url} {parks[0].thread_id} --single-worker "
            "--runner durability.demo:publish --value '{\"approved\": true}'"
        )
