"""``durability outbox status|forget|release``: what a store has not replicated yet, unregistering
an abandoned plane, and re-queueing refused rows."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from durability.cli._common import (
    cell,
    friendly_errors,
    json_option,
    open_store,
    print_json,
    print_table,
    url_argument,
)
from durability.humanize import format_age, format_bytes

if TYPE_CHECKING:
    from durability.replication.status import ProjectOutbox


@click.group()
def outbox() -> None:
    """Show and manage a store's replication outbox."""


@outbox.command("status")
@url_argument
@json_option
def status(url: str, as_json: bool) -> None:
    """Pending (and their size), synced and quarantined rows per project, the oldest pending
    row's age, the plane each project replicates to, and its connection: "connected" with how
    long ago its drain was last seen (no drain for minutes: the process that connected has
    gone, and its record was left open), "disconnected" (its rows wait for the next connect) or
    "no connection" (never connected, or forgotten), and the erasures waiting for the plane.
    --json keeps numbers (bytes, seconds)."""
    from durability.replication.outbox import supports_outbox
    from durability.replication.status import outbox_status

    with friendly_errors(), open_store(url) as store:
        if not supports_outbox(store):
            raise click.ClickException(
                f"{store!r} keeps no outbox: the {store.provider} store does not replicate"
            )
        rows = outbox_status(store)
        replicates = store.replicates
        now = store.clock()
    if as_json:
        print_json([_row_json(r, now) for r in rows])
        return
    print_table(
        [
            "project",
            "pending",
            "size",
            "synced",
            "quarantined",
            "oldest pending",
            "plane",
            "connection",
            "erasures",
        ],
        [
            (
                r.project_id or "(none)",
                r.pending,
                format_bytes(r.pending_bytes),
                r.synced,
                r.quarantined,
                None if r.oldest_pending_at is None else format_age(now - r.oldest_pending_at),
                r.connected_to,
                _connection_cell(r, now),
                r.erasures,
            )
            for r in rows
        ],
        width=120,
    )
    if sum(r.pending + r.quarantined for r in rows):
        click.echo(_UNSENT_REPLICATING if replicates else _UNSENT_NOT_REPLICATING)


#: What keeps the rows the plane lacks, for a store that replicates and one that does not.
_UNSENT_REPLICATING = (
    "\nThe store replicates: the sweep, `durability threads delete` and Redis's TTL keep "
    "every row the plane lacks until it is sent (a disconnected project's at its next "
    "connect). `durability outbox forget URL --project P` gives up a plane for good."
)
_UNSENT_NOT_REPLICATING = (
    "\nThe store was never connected (or its connections were forgotten), so it does not "
    "replicate: nothing keeps these rows from the sweep; those still held when a project "
    "first connects are sent then."
)


def _seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else (now - then).total_seconds()


def _row_json(r: ProjectOutbox, now: datetime) -> dict[str, Any]:
    return {
        "project_id": r.project_id,
        "pending": r.pending,
        "pending_bytes": r.pending_bytes,
        "synced": r.synced,
        "quarantined": r.quarantined,
        "oldest_pending_at": r.oldest_pending_at,
        "oldest_pending_age_seconds": _seconds(now, r.oldest_pending_at),
        "connected_to": r.connected_to,
        "connection": r.connection,
        "disconnected_at": r.disconnected_at,
        "drain": r.drain(now),
        "drain_seen_at": r.seen_at,
        "drain_seen_age_seconds": _seconds(now, r.seen_at),
        "last_acked_at": r.acked_at,
        "erasures_waiting": r.erasures,
    }


def _connection_cell(r: ProjectOutbox, now: datetime) -> str:
    if r.connection == "none":
        return "no connection"
    if r.connection == "disconnected" and r.disconnected_at is not None:
        return f"disconnected {cell(r.disconnected_at)} ({format_age(now - r.disconnected_at)} ago)"
    seen = "ever" if r.seen_at is None else format_age(now - r.seen_at)
    if r.drain(now) == "live":
        return f"connected, drain seen {seen} ago"
    return f"connected, but no drain since {seen}: the process that connected has gone"


@outbox.command("forget")
@url_argument
@click.option(
    "--project",
    "project_id",
    default="",
    metavar="P",
    help="The project whose connection to forget [default: the default project, empty].",
)
@click.option(
    "--force",
    is_flag=True,
    help="Forget it even though the plane lacks some of the project's checkpoints.",
)
@json_option
def forget(url: str, project_id: str, force: bool, as_json: bool) -> None:
    """Unregister project P of the store at URL from replication (when its plane is abandoned).

    A disconnect keeps a project's connection recorded, so the store goes on replicating: the
    sweep, `durability threads delete` and Redis's TTL keep every row the plane lacks until
    the next connect sends it. This removes the record. Once none is left the store no longer
    replicates and nothing keeps those rows. Refuses while the project has rows the plane lacks
    (pending or quarantined), unless --force; the rows themselves stay, and a later connect
    records the project again and sends whatever is still held.
    """
    from durability.replication.outbox import supports_outbox

    with friendly_errors(), open_store(url) as store:
        if not supports_outbox(store):
            raise click.ClickException(
                f"{store!r} keeps no outbox: the {store.provider} store does not replicate"
            )
        records = store.connections()
        record = next((c for c in records if c.project_id == project_id), None)
        if record is None:
            recorded = ", ".join(repr(c.project_id) for c in records) or "none"
            raise click.ClickException(
                f"no connection of project {project_id!r} is recorded in {store!r} (recorded: "
                f"{recorded}); nothing to forget"
            )
        pending = len(store.outbox(state="pending", project_id=project_id))
        quarantined = len(store.outbox(state="quarantined", project_id=project_id))
        if pending + quarantined and not force:
            raise click.ClickException(
                f"refusing to forget the connection of project {project_id!r} to {record.target}: "
                f"the plane does not have {pending + quarantined} of its checkpoints yet ({pending} "
                f"pending, {quarantined} quarantined); connect it so the drain sends them (see "
                "`durability outbox status`), or pass --force to give them up"
            )
        if record.open:
            click.echo(
                f"warning: the record says project {project_id!r} has been connected since "
                f"{record.connected_at.isoformat()} (a crash leaves it so); a process still "
                "connected goes on sending, and records it again at its next connect",
                err=True,
            )
        store.forget_connection(project_id)
        replicates = store.replicates
    if as_json:
        print_json(
            {
                "project_id": project_id,
                "target": record.target,
                "unsent": pending + quarantined,
                "replicates": replicates,
            }
        )
        return
    outcome = "the store still replicates other projects"
    if not replicates:
        outcome = "the store no longer replicates"
        if pending + quarantined:
            outcome += f", so nothing keeps its {pending + quarantined} unsent rows any more"
    click.echo(f"forgot the connection of project {project_id!r} to {record.target}; {outcome}")


@outbox.command("release")
@url_argument
@click.argument("checkpoint_ids", nargs=-1)
@json_option
def release(url: str, checkpoint_ids: tuple[str, ...], as_json: bool) -> None:
    """Put quarantined rows back in the outbox (those CHECKPOINT_IDS, or all of them) to be sent again."""
    from durability.replication.status import keys_of

    with friendly_errors(), open_store(url) as store:
        quarantined = store.outbox(state="quarantined")
        if checkpoint_ids:
            wanted = set(checkpoint_ids)
            chosen = [e for e in quarantined if e.checkpoint_id in wanted]
            unknown = sorted(wanted - {e.checkpoint_id for e in chosen})
            if unknown:
                raise click.ClickException(
                    f"not quarantined in {store!r}: {', '.join(repr(u[:80]) for u in unknown[:5])}; "
                    "list them with `durability outbox status` and `durability threads show`"
                )
            released = store.release(keys_of(chosen))
        else:
            released = store.release()
    if as_json:
        print_json({"released": released})
    else:
        click.echo(f"released {released} quarantined row(s); the next drain sends them again")
