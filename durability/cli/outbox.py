"""``durability outbox status|release``: what a store has not replicated yet, and re-queueing refused rows."""

from __future__ import annotations

import click

from durability.cli._common import (
    friendly_errors,
    json_option,
    open_store,
    print_json,
    print_table,
    url_argument,
)


def register(cli: click.Group) -> None:
    """Add the ``outbox`` group."""
    cli.add_command(outbox)


@click.group()
def outbox() -> None:
    """Show and manage a store's replication outbox."""


@outbox.command("status")
@url_argument
@json_option
def status(url: str, as_json: bool) -> None:
    """Pending, synced and quarantined rows per project, the oldest pending row's age, and the
    plane each project replicates to ("no connection": its rows stay buffered)."""
    from durability.replication.outbox import outbox_status, supports_outbox

    with friendly_errors(), open_store(url) as store:
        if not supports_outbox(store):
            raise click.ClickException(
                f"{store!r} keeps no outbox: the {store.provider} store does not replicate"
            )
        rows = outbox_status(store)
        now = store.clock()
    ages = {
        r.project_id: (now - r.oldest_pending_at).total_seconds() if r.oldest_pending_at else None
        for r in rows
    }
    if as_json:
        print_json(
            [
                {
                    "project_id": r.project_id,
                    "pending": r.pending,
                    "synced": r.synced,
                    "quarantined": r.quarantined,
                    "oldest_pending_at": r.oldest_pending_at,
                    "oldest_pending_age_seconds": ages[r.project_id],
                    "connected_to": r.connected_to,
                }
                for r in rows
            ]
        )
        return
    print_table(
        ["project", "pending", "synced", "quarantined", "oldest pending", "age (s)", "connection"],
        [
            (
                r.project_id or "(none)",
                r.pending,
                r.synced,
                r.quarantined,
                r.oldest_pending_at,
                None if ages[r.project_id] is None else round(ages[r.project_id] or 0.0, 1),
                r.connected_to or "no connection",
            )
            for r in rows
        ],
    )


@outbox.command("release")
@url_argument
@click.argument("checkpoint_ids", nargs=-1)
@json_option
def release(url: str, checkpoint_ids: tuple[str, ...], as_json: bool) -> None:
    """Put quarantined rows back in the outbox (those CHECKPOINT_IDS, or all of them) to be sent again."""
    from durability.replication.outbox import keys_of

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
