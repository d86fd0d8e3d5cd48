"""``durability threads erase|reopen``: erase a thread for good (with a receipt), or let its id back in."""

from __future__ import annotations

from typing import Any

import click

from durability.cli._common import (
    friendly_errors,
    json_option,
    open_store,
    plane_key,
    plane_options,
    print_json,
    url_argument,
)
from durability.humanize import format_bytes
from durability.replication.client import PlaneClient
from durability.replication.erasure import erase_thread as erase_everywhere
from durability.stores.erasure import ErasurePlan, ErasureReceipt, plan_erasure


@click.command("erase")
@url_argument
@click.argument("thread_id")
@click.option("--by", default="", help="Who asked for the erasure (kept in the tombstone).")
@click.option("--yes", is_flag=True, help="Erase without asking (otherwise: preview, then ask).")
@plane_options(required=False)
@json_option
def erase_thread(
    url: str,
    thread_id: str,
    by: str,
    yes: bool,
    plane_url: str | None,
    api_key_env: str,
    project: str,
    as_json: bool,
) -> None:
    """Erase THREAD from the store at URL: every checkpoint, pending write, ledger record, park,
    lease and outbox row (pending and quarantined rows are dropped, never sent), and a tombstone
    that refuses every later write to it; then ask the plane to erase its copy. Prints the receipt.

    The plane is --plane (or DURABILITY_PLANE_URL) with the key in DURABILITY_PLANE_API_KEY (a
    key created with --can-erase), plus every plane the store replicates to. A plane that does
    not answer gets the request later, from the drain; one without the erase route keeps its
    copy, and the receipt says so. Without --yes it previews what would go and asks (with
    --json: previews only). Erasing an erased thread removes nothing more and says so.
    """
    with friendly_errors(), open_store(url) as store:
        plan = plan_erasure(store, thread_id)
        if not yes:
            if as_json:
                print_json({"preview": True, **_plan_json(plan)})
                return
            _echo_plan(plan)
            click.confirm(f"Erase thread {thread_id!r} from {store!r}?", abort=True)
        if plane_url is None:
            receipt = erase_everywhere(store, thread_id, by=by)
        else:
            with PlaneClient(plane_url, plane_key(api_key_env)) as client:
                receipt = erase_everywhere(
                    store, thread_id, by=by, client=client, project_id=project
                )
    if as_json:
        print_json(receipt.to_dict())
    else:
        _echo_receipt(receipt)


@click.command("reopen")
@url_argument
@click.argument("thread_id")
@click.option("--yes", is_flag=True, help="Reopen without asking.")
@json_option
def reopen_thread(url: str, thread_id: str, yes: bool, as_json: bool) -> None:
    """Lift THREAD's tombstone in the store at URL so the id can be used for a new thread.

    The erased data stays gone; the plane keeps its own tombstone.
    """
    with friendly_errors(), open_store(url) as store:
        if store.tombstones is None or store.tombstones.get(thread_id) is None:
            raise click.ClickException(f"thread {thread_id!r} is not erased in {store!r}")
        if not yes and not as_json:
            click.confirm(f"Reopen the erased thread id {thread_id!r} in {store!r}?", abort=True)
        store.tombstones.reopen(thread_id)
    if as_json:
        print_json({"reopened": True})
    else:
        click.echo("reopened: new writes to this thread id are accepted again")


def _plan_json(plan: ErasurePlan) -> dict[str, Any]:
    return {
        "tombstone": plan.tombstone,
        "already_erased": plan.already is not None,
        "checkpoints": plan.checkpoints,
        "bytes": plan.bytes,
        "pending_writes": plan.pending_writes,
        "runs": list(plan.run_ids),
        "ledger_record": plan.ledger_record,
        "finished_mark": plan.finished_mark,
        "live_lease": plan.live_lease,
        "park": plan.park,
        "outbox_sent": plan.outbox_sent,
        "outbox_pending": list(plan.outbox_pending),
        "outbox_quarantined": [list(q) for q in plan.outbox_quarantined],
    }


def _echo_plan(plan: ErasurePlan) -> None:
    if plan.already is not None:
        click.echo(f"already erased at {plan.already.erased_at.isoformat()}")
    click.echo(
        f"would erase: {plan.checkpoints} checkpoints ({format_bytes(plan.bytes)}), "
        f"{plan.pending_writes} pending writes, ledger record: {_yes(plan.ledger_record)}, "
        f"park: {_yes(plan.park)}, live lease: {_yes(plan.live_lease)}"
    )
    click.echo(
        f"outbox: {plan.outbox_sent} sent, {len(plan.outbox_pending)} pending and "
        f"{len(plan.outbox_quarantined)} quarantined (dropped, never sent)"
    )


def _echo_receipt(receipt: ErasureReceipt) -> None:
    s, o = receipt.store, receipt.outbox
    head = "already erased; erased again" if receipt.already_erased else "erased"
    click.echo(f"{head} at {receipt.erased_at.isoformat()} (tombstone {receipt.tombstone})")
    click.echo(
        f"store {s['url']}: {s['checkpoints']} checkpoints ({format_bytes(s['bytes'])}), "
        f"{s['pending_writes']} pending writes, ledger record {_yes(s['ledger_record'])}, "
        f"park {_yes(s['park'])}"
    )
    click.echo(
        f"outbox: {o['sent_rows_removed']} sent rows removed, {len(o['pending_dropped'])} "
        f"pending and {len(o['quarantined_dropped'])} quarantined dropped (never sent)"
    )
    click.echo(f"plane: {receipt.plane.get('status')}")
    for project, detail in receipt.plane.get("projects", {}).items():
        click.echo(
            f"  project {project or '(default)'} at {detail.get('target')}: {detail['status']}"
        )
    click.echo("not reachable from here:")
    for what in receipt.unreachable:
        click.echo(f"  - {what}")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
