"""``durability restore``: fetch a thread from the plane into a local store (plan, then apply)."""

from __future__ import annotations

import sys
from typing import Any

import click

from durability.cli._common import (
    CHECKPOINT_COLUMNS,
    friendly_errors,
    json_option,
    open_store,
    plane_key,
    plane_options,
    print_json,
    print_table,
    url_argument,
)


@click.command()
@url_argument
@click.argument("thread_id", metavar="THREAD")
@plane_options(required=True)
@click.option(
    "--single-worker",
    is_flag=True,
    help="SQLite: this host's workers are the only resumers, so the store may hold a parked run.",
)
@click.option("--dry-run", is_flag=True, help="Show the plan; write nothing.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace a thread the store already holds (its local checkpoints, writes, park and "
    "ledger record are deleted first).",
)
@json_option
def restore(
    url: str,
    thread_id: str,
    plane_url: str,
    api_key_env: str,
    project: str,
    single_worker: bool,
    dry_run: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Restore THREAD from the plane TARGET into the store at URL.

    Prints the plan (every checkpoint in write order, the park to re-create and where its
    deadline comes from, warnings), then writes it unless --dry-run. The rows are written as
    already replicated, so they are never sent back. A thread the store already holds is
    refused unless --overwrite. Exit code 1 when the plane holds nothing of THREAD or the
    restore is refused (with --dry-run: would be refused, as the store stands now).
    """
    from durability.errors import DurabilityError
    from durability.replication.client import PlaneClient
    from durability.restore import apply_restore, plan_restore

    key = plane_key(api_key_env)
    options = {"single_worker": True} if single_worker else {}
    result = None
    error: str | None = None
    with (
        friendly_errors(),
        open_store(url, **options) as store,
        PlaneClient(plane_url, key) as client,
    ):
        plan = plan_restore(store, thread_id, client=client, project_id=project)
        if plan.empty:
            error = f"the plane {plan.target} holds no checkpoint of thread {thread_id!r}; nothing to restore"
        elif dry_run:
            error = plan.refusal_with(overwrite=overwrite)
        else:
            try:
                result = apply_restore(store, plan, overwrite=overwrite)
            except DurabilityError as exc:
                error = str(exc)
    _report(plan, result, error, url=url, dry_run=dry_run, as_json=as_json)


def _report(
    plan: Any, result: Any, error: str | None, *, url: str, dry_run: bool, as_json: bool
) -> None:
    """The plan and what was restored, as JSON or for people; exit 1 with the error."""
    from durability._util import redact_url

    if as_json:
        print_json(
            {
                "plan": plan.to_dict(),
                "dry_run": dry_run,
                "restored": None if result is None else _result_dict(result),
                "error": error,
            }
        )
    else:
        _print_plan(plan)
        if result is not None:
            replaced = result.replaced
            click.echo(
                f"restored {len(result.checkpoints)} checkpoint(s) into {redact_url(url)}"
                + (f"; replaced the local thread ({replaced.describe()})" if replaced else "")
            )
        elif dry_run and error is None:
            click.echo("dry run: nothing written")
    if error is not None:
        click.echo(
            f"{'dry run: would not restore' if dry_run else 'not restored'}: {error}", err=True
        )
        sys.exit(1)


def _print_plan(plan: Any) -> None:
    click.echo(
        f"thread {plan.thread_id} on {plan.target}: {len(plan.checkpoints)} checkpoint(s) "
        f"({'the whole history' if plan.source == 'history' else 'the latest only'})"
    )
    if plan.checkpoints:
        print_table(
            ["#", *CHECKPOINT_COLUMNS],
            [
                (
                    r["order"],
                    r["checkpoint_id"],
                    r["namespace"],
                    r["run_id"],
                    r["node_id"],
                    r["step"],
                    r["step_type"],
                    r["status"],
                    r["created_at"],
                )
                for r in plan.rows()
            ],
        )
    if plan.park is not None:
        source = (
            "declared by the ask"
            if plan.park.deadline_source == "declared"
            else "the thread's waiting horizon"
        )
        click.echo(
            f"park: {plan.park.reason!r} at step {plan.park.node_id}, deadline "
            f"{plan.park.deadline.isoformat()} ({source})"
        )
    for warning in plan.warnings:
        click.echo(f"warning: {warning}")


def _result_dict(result: Any) -> dict[str, Any]:
    return {
        "checkpoints": [
            {"seq": c.seq, "checkpoint_id": c.checkpoint_id, "namespace": c.namespace}
            for c in result.checkpoints
        ],
        "park": None
        if result.park is None
        else {"deadline": result.park.deadline, "deadline_source": result.park.deadline_source},
        "replaced": None
        if result.replaced is None
        else {
            "checkpoints": result.replaced.checkpoints,
            "unsynced": result.replaced.unsynced,
            "had_park": result.replaced.park is not None,
        },
    }
