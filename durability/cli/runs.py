"""``durability runs`` and ``durability resume``."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

import click

from durability.cli._common import (
    Duration,
    friendly_errors,
    json_option,
    open_store,
    plane_key,
    plane_options,
    print_json,
    print_table,
    url_argument,
)

if TYPE_CHECKING:
    from durability.runs import Runner, RunResult
    from durability.stores.base import Store


@click.command()
@url_argument
@json_option
def runs(url: str, as_json: bool) -> None:
    """List every run in the store at URL: status, last step, lease, and parks with time left.

    A status is completed, failed (with its reason), parked (waiting on an ask until its
    deadline), running (a live lease), stalled (killed, lost its lease or paused in step mode:
    resume it) or abandoned (never ended, and a later run started on its thread).
    """
    from durability.runs import list_runs

    with friendly_errors(), open_store(url) as store:
        infos = list_runs(store, progress=not as_json)
    if as_json:
        print_json([asdict(i) for i in infos])
        return
    print_table(
        [
            "thread",
            "run",
            "runner",
            "status",
            "reason",
            "last step",
            "steps",
            "updated",
            "lease until",
            "park",
            "time left",
        ],
        [
            (
                i.thread_id,
                i.run_id,
                i.runner,
                i.status,
                i.reason,
                i.last_step,
                i.steps,
                i.updated_at,
                i.lease_expires_at,
                i.park_reason,
                _time_left(i.time_left),
            )
            for i in infos
        ],
    )


def _disconnect(connection: Any, thread_id: str, url: str, timeout: float) -> None:
    """Close the connection after its final drain; warn when rows of the thread stay pending."""
    from durability._util import redact_url

    finished = connection.close(timeout=timeout)
    if not connection.replicating:
        return
    pending = len(
        connection.store.outbox(
            state="pending", project_id=connection.project_id, thread_id=thread_id
        )
    )
    if not pending:
        return
    why = (
        f"the final drain to {connection.target} did not finish within {timeout:g}s"
        if not finished
        else f"the plane {connection.target} did not take them ({connection.last_error or 'no answer'})"
    )
    click.echo(
        f"warning: {pending} checkpoint(s) of thread {thread_id} are still pending: {why}. They "
        "stay in the store's outbox and are sent on its next connection; see them with "
        f"`durability outbox status {redact_url(url)}`",
        err=True,
    )


def _time_left(value: Any) -> Any:
    if value is None:
        return None
    return "expired" if value.total_seconds() <= 0 else value


@click.command()
@url_argument
@click.argument("thread_id")
@click.option(
    "--runner",
    "runner_spec",
    required=True,
    metavar="MODULE:ATTR",
    help="The run definition: a Runner, or a factory returning one (the current directory is importable).",
)
@click.option(
    "--value",
    "value_json",
    default=None,
    metavar="JSON",
    help="The answer for a parked run, as JSON.",
)
@click.option(
    "--steps",
    "max_steps",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Step mode: run at most N steps, then pause the run (resume it again to go on).",
)
@click.option(
    "--single-worker",
    is_flag=True,
    help="SQLite: this host's workers are the only resumers, so the run may park again.",
)
@click.option(
    "--deployment-url",
    default=None,
    metavar="URL",
    help="A flow's deployment store, where it marks the session threads it owns (default: URL).",
)
@click.option(
    "--drain-timeout",
    type=Duration(),
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="With a plane: how long to wait for the resumed run's checkpoints to be sent.",
)
@plane_options(required=False)
@json_option
def resume(
    url: str,
    thread_id: str,
    runner_spec: str,
    value_json: str | None,
    max_steps: int | None,
    single_worker: bool,
    deployment_url: str | None,
    drain_timeout: float,
    plane_url: str | None,
    api_key_env: str,
    project: str,
    as_json: bool,
) -> None:
    """Resume the latest run of THREAD in the store at URL with the runner MODULE:ATTR.

    A parked run needs --value (its answer); a killed or failed run resumes after its last
    completed step; a completed run is refused (exit code 2). Exit code 1 when the resumed run
    fails. --steps N runs in step mode: at most N steps, then the run pauses (status paused,
    no run end, exit code 0) until the next resume.

    With a plane (--plane or DURABILITY_PLANE_URL, the key from DURABILITY_PLANE_API_KEY) the
    store's project --project is connected for the resume: a THREAD the store has no record of
    is restored from the plane first (unless DURABILITY_RESTORE_FROM_PLANE is off), and the
    resumed run's new checkpoints, written under --project, replicate: they are drained before
    the command exits, up to --drain-timeout. Those the plane has not taken by then stay pending
    (a warning says so) and are sent on the store's next connection. Without a plane the run
    keeps its own project (--project sets another).
    """
    from durability.runs import load_runner

    value = _resume_value(value_json)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: runners next to the caller import
    options = {"single_worker": True} if single_worker else {}
    with friendly_errors():
        runner = load_runner(runner_spec)
        key = plane_key(api_key_env) if plane_url else None
        with open_store(url, **options) as store:
            result = _resume_connected(
                runner,
                store,
                thread_id,
                value,
                max_steps=max_steps,
                deployment_url=deployment_url,
                plane=(plane_url, key) if plane_url and key else None,
                project=project,
                drain_timeout=drain_timeout,
                url=url,
            )
    _print_result(result, as_json)


def _resume_value(value_json: str | None) -> Any:
    """The parked run's answer from ``--value`` (JSON), or no value."""
    from durability.runs import NO_VALUE

    if value_json is None:
        return NO_VALUE
    try:
        return json.loads(value_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{value_json!r} is not JSON ({exc}); quote it, e.g. --value '{{\"approved\": true}}'",
            param_hint="--value",
        ) from exc


def _resume_connected(
    runner: Runner,
    store: Store,
    thread_id: str,
    value: Any,
    *,
    max_steps: int | None,
    deployment_url: str | None,
    plane: tuple[str, str] | None,
    project: str,
    drain_timeout: float,
    url: str,
) -> RunResult:
    """Resume with the deployment store and, given ``plane`` (URL, key), a plane connection,
    draining the run's checkpoints before returning; a run that cannot resume exits 2."""
    from durability.errors import RunNotResumable

    deployment = open_store(deployment_url) if deployment_url else None
    connection = None
    try:
        if plane is not None:
            from durability.replication import connect

            connection = connect(store, plane[0], plane[1], project_id=project)
        return runner.resume(
            store,
            thread_id,
            value,
            deployment_store=deployment,
            connection=connection,
            # the connection drains only its project's rows: the run's must be its
            project_id=project if connection is not None or project else None,
            max_steps=max_steps,
        )
    except RunNotResumable as exc:
        click.echo(f"not resumed: {exc}", err=True)
        sys.exit(2)
    finally:
        if connection is not None:
            _disconnect(connection, thread_id, url, drain_timeout)
        if deployment is not None:
            deployment.close()


def _print_result(result: RunResult, as_json: bool) -> None:
    """The resumed run's outcome, as JSON or as lines for people; exit 1 when it failed."""
    if as_json:
        data = {f.name: getattr(result, f.name) for f in fields(result) if f.name != "exception"}
        data["park"] = None if result.park is None else asdict(result.park)
        print_json(data)
    else:
        click.echo(f"run {result.run_id} on thread {result.thread_id}: {result.status}")
        click.echo(f"last step: {result.last_step or '-'}")
        if result.reason:
            click.echo(f"reason: {result.reason}" + (f" ({result.error})" if result.error else ""))
        if result.park is not None:
            click.echo(f"parked: {result.park.reason!r} until {result.park.deadline.isoformat()}")
    if not result.ok:
        sys.exit(1)
