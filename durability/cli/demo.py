"""``durability demo``: the main job — the demo fleet, its plane, and the notebooks executed on it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from durability.cli._common import friendly_errors, json_option, out_option, print_json, print_table

if TYPE_CHECKING:
    from durability.demo import Fleet
    from durability.stores.base import Store

#: The demo's defaults: about three months of history, a few thousand conversations.
DAYS = 90.0
THREADS = 2000


@click.command()
@out_option(
    "durability-out",
    "Folder for the demo stores, the plane's database, executed notebooks and charts.",
)
@click.option(
    "--notebooks/--no-notebooks",
    default=True,
    show_default=True,
    help="Execute the three notebooks on the demo (headless).",
)
@click.option(
    "--days",
    type=click.FloatRange(min=7),
    default=DAYS,
    show_default=True,
    help="The span of the fleet's history, ending now.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=THREADS,
    show_default=True,
    help="Background conversations over that span (0: only the scripted runs).",
)
@json_option
def demo(out: Path, notebooks: bool, days: float, threads: int, as_json: bool) -> None:
    """Build the demo fleet, replicate it to a plane on loopback, lose and restore a store,
    then execute the notebooks on it.

    The fleet: --days of history (default three months) with --threads background
    conversations (weekly seasons and bursts, heavy-tailed sizes with a few multi-MiB
    attachments the plane refuses, idle gaps from hours to weeks), and real runs on the embedded SQLite default (completed, failed,
    stopped and parked runs, conversations with idle gaps, flows owning session threads), drained
    to the project's plane served on 127.0.0.1 (a maintenance window, oversized rows the plane
    refuses and quarantined). An edge worker's store is deleted and one of its runs restored
    from the plane. Executed notebooks go to OUT/notebooks, their charts to OUT/charts.
    """
    import durability
    from durability import bundle
    from durability.demo import build_fleet, run_notebooks

    with friendly_errors():  # a copy installed without its notebooks fails before the fleet
        for name in bundle.NOTEBOOK_NAMES if notebooks else ():
            bundle.notebook(name)

    def progress(message: str) -> None:
        click.echo(message, err=True)

    with (
        friendly_errors(),
        build_fleet(out, days=days, threads=threads, progress=progress) as fleet,
    ):
        with durability.open(fleet.store_url) as store:
            summary = _summary(store, fleet)
        if notebooks:
            progress("executing the notebooks on the demo (headless)")
        executed = run_notebooks(fleet) if notebooks else []
    summary["notebooks"] = [{"path": str(e.path), "seconds": round(e.seconds, 1)} for e in executed]
    summary["charts"] = sorted(str(p) for p in (out / "charts").glob("*.png"))
    if as_json:
        print_json(summary)
        return
    _print_summary(summary, fleet, out)


def _summary(store: Store, fleet: Fleet) -> dict[str, Any]:
    """What the demo built, JSON-ready: the stores, threads, runs by status, the outbox."""
    from durability.replication import outbox_status
    from durability.runs import list_runs

    records = list(store.iter_threads())
    statuses = Counter(r.status for r in list_runs(store))
    (status,) = outbox_status(store)
    return {
        "url": fleet.store_url,
        "edge_url": fleet.edge_url,
        "threads": len(records),
        "checkpoints": sum(r.checkpoints for r in records),
        "parks": statuses.get("parked", 0),
        "runs": dict(sorted(statuses.items())),
        "outbox": {
            "pending": status.pending,
            "synced": status.synced,
            "quarantined": status.quarantined,
        },
        "lost_threads": fleet.lost_threads,
        "restored_thread": fleet.restored_thread,
    }


def _print_summary(summary: dict[str, Any], fleet: Fleet, out: Path) -> None:
    """The summary for people, and where to look next."""
    outbox = summary["outbox"]
    click.echo(f"demo store: {fleet.store_url}  ({fleet.start:%Y-%m-%d} to {fleet.end:%Y-%m-%d})")
    click.echo(
        f"{summary['threads']} threads, {summary['checkpoints']} checkpoints; runs: "
        + ", ".join(f"{count} {s}" for s, count in summary["runs"].items())
    )
    click.echo(
        f"replicated to the plane ({fleet.plane.db_url}): {outbox['synced']} synced, "
        f"{outbox['quarantined']} quarantined (refused by the plane), {outbox['pending']} pending"
    )
    click.echo(
        f"edge store lost and restored: {fleet.edge_url} — {fleet.restored_thread} restored and "
        f"resumed; {len(fleet.lost_threads)} threads still only on the plane"
    )
    if summary["notebooks"]:
        rows = [(Path(e["path"]).name, f"{e['seconds']:.1f}") for e in summary["notebooks"]]
        print_table(["notebook", "seconds"], rows)
        click.echo(f"executed notebooks: {(out / 'notebooks').resolve()}")
        click.echo(f"charts: {(out / 'charts').resolve()}")
    click.echo(f"open the notebooks in JupyterLab: durability lab --out {out}")
    click.echo(f"or as a static page: durability report {fleet.store_url} --out {out / 'report'}")
