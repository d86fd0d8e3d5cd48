"""``durability doctor``: check every invariant a store relies on, and name each break."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import click

from durability.cli._common import (
    Duration,
    friendly_errors,
    json_option,
    open_store,
    plane_key,
    plane_options,
    print_json,
    url_argument,
)


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
@plane_options(required=False)
@click.option(
    "--fix", is_flag=True, help="Make the safe repairs (preview first), then check again."
)
@click.option("--yes", is_flag=True, help="With --fix: also the repairs that delete state.")
@json_option
def doctor(
    url: str,
    grace: float,
    overdue: float,
    plane_url: str | None,
    api_key_env: str,
    project: str,
    fix: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Check that the store at URL is whole; exit 1 if anything is broken.

    Reads only. Findings of severity info (the sweep's pending work: marks past due, parks
    past their deadline) are listed but do not make the store broken. Each problem names its
    check, its severity (error, warning, info), the thread, how many rows, what is wrong and
    the command that fixes it. The checks and what
    each means are listed in the guide (docs/guides/doctor.md).

    --fix makes only the safe repairs: release leases of ended runs, rebuild the Redis
    indexes, drop outbox records whose checkpoint is gone, re-queue rows the plane lacks
    (with --plane), and — after asking, or with --yes — drop pending writes whose
    checkpoint is gone.
    It prints the plan first and checks the store again afterwards.

    With --plane, each thread's rows of project --project that the store marks synced are
    compared with what the plane holds (a count and a checksum per thread; no state is
    downloaded), and a thread whose replica is short is named with the rows it lacks.
    """
    from durability.doctor import diagnose

    options: dict[str, Any] = {}
    if url.split("://", 1)[0].lower().startswith("redis"):
        options["reconcile"] = False  # opening must not repair the indexes the doctor checks
    spans = timedelta(seconds=grace), timedelta(seconds=overdue)
    repaired: dict[str, Any] = {}
    with friendly_errors(), open_store(url, **options) as store, ExitStack() as stack:
        replica = None
        if plane_url is not None:
            from durability.doctor.replica import Replica
            from durability.replication.client import PlaneClient

            client = stack.enter_context(PlaneClient(plane_url, plane_key(api_key_env)))
            replica = Replica.of(client, project)
        diagnosis = diagnose(store, grace=spans[0], overdue=spans[1], plane=replica)
        if fix:
            repaired = _fix(store, diagnosis, yes=yes, as_json=as_json)
            diagnosis = diagnose(store, grace=spans[0], overdue=spans[1], plane=replica)
    if fix and as_json:
        print_json({**repaired, "after": diagnosis.to_dict()})
    elif as_json:
        print_json(diagnosis.to_dict())
    else:
        _show(diagnosis)
    if not diagnosis.clean:
        raise SystemExit(1)


def _fix(store: Any, diagnosis: Any, *, yes: bool, as_json: bool) -> dict[str, Any]:
    """Preview the safe repairs, ask before any that deletes state, apply; what was done."""
    from durability.doctor.repair import apply_repairs, plan_repairs

    plan = plan_repairs(diagnosis)
    if not as_json:
        _show(diagnosis)
        click.echo(f"\nrepairs: {len(plan.steps)} safe, {len(plan.left)} problems have none")
        for step in plan.steps:
            deletes = " (deletes state)" if step.deletes else ""
            where = f" on thread {step.thread_id!r}" if step.thread_id is not None else ""
            click.echo(f"  {step.repair}{where}: {step.rows} rows{deletes}")
    deleting = sum(s.rows for s in plan.steps if s.deletes)
    allow = yes or (
        deleting > 0
        and not as_json
        and click.confirm(f"Delete {deleting} rows of state from {diagnosis.store}?")
    )
    result = apply_repairs(store, plan, allow_deletes=allow)
    if not as_json:
        done = ", ".join(f"{name}: {n}" for name, n in result.applied.items()) or "nothing"
        click.echo(f"repaired: {done}; skipped {len(result.skipped)} (deletes state: --yes)\n")
    return {
        "before": diagnosis.to_dict(),
        "repairs": [
            {
                "repair": s.repair,
                "check": s.check,
                "thread_id": s.thread_id,
                "rows": s.rows,
                "deletes": s.deletes,
            }
            for s in plan.steps
        ],
        "applied": result.applied,
        "skipped": [
            {"repair": s.repair, "thread_id": s.thread_id, "why": why} for s, why in result.skipped
        ],
    }


def _show(diagnosis: Any) -> None:
    ran = f"{len(diagnosis.checks)} checks ({len(diagnosis.skipped)} do not apply)"
    if not diagnosis.problems:
        click.echo(f"{diagnosis.store} is whole: {ran} found nothing")
        return
    counts = ", ".join(f"{n} {s}" for s, n in diagnosis.counts().items() if n)
    if diagnosis.clean:  # only notes: the sweep's pending work, not a break
        click.echo(
            f"{diagnosis.store} is whole: {ran} found nothing broken; {len(diagnosis.problems)} "
            "notes (info: the sweep's pending work, `durability sweep` acts on it)"
        )
    else:
        click.echo(f"{diagnosis.store} is broken: {ran} found {len(diagnosis.problems)} ({counts})")
    for p in diagnosis.problems:
        thread = f" thread {p.thread_id!r}" if p.thread_id is not None else ""
        click.echo(f"\n{p.severity.upper()} {p.check}{thread} ({p.rows} rows): {p.detail}")
        click.echo(f"  fix: {p.fix}" if p.fix else "  fix: none (report only)")
