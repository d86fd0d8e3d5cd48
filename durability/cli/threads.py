"""``durability threads list|show|delete|mark|erase|reopen``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from durability.cli._common import (
    CHECKPOINT_COLUMNS,
    friendly_errors,
    json_option,
    open_store,
    print_json,
    print_table,
    url_argument,
)
from durability.cli.erase import erase_thread, reopen_thread
from durability.humanize import format_bytes
from durability.stores.parks import park_of
from durability.stores.rows import ID_FIELDS, SCALAR_FIELDS
from durability.vocabulary import status_word

if TYPE_CHECKING:
    from durability.model import Checkpoint, Park, ThreadRecord


@click.group()
def threads() -> None:
    """List, show, delete, mark, erase and reopen checkpoint threads."""


threads.add_command(erase_thread)
threads.add_command(reopen_thread)


@threads.command("list")
@url_argument
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Show at most this many threads."
)
@json_option
def list_threads(url: str, limit: int | None, as_json: bool) -> None:
    """List the threads in the store at URL: checkpoints, size, newest write, owner, finished mark."""
    with friendly_errors(), open_store(url) as store:
        records = []
        for record in store.iter_threads():
            records.append(record)
            if limit is not None and len(records) >= limit:
                break
    if as_json:
        print_json([_record_json(r) for r in records])
        return
    print_table(
        ["thread", "checkpoints", "bytes", "newest", "owner", "finished", "due"],
        [
            (
                r.thread_id,
                r.checkpoints,
                format_bytes(r.size_bytes),
                r.newest_at,
                r.owner,
                r.finished_at,
                r.due_at,
            )
            for r in records
        ],
    )


@threads.command("show")
@url_argument
@click.argument("thread_id")
@click.option("--namespace", default=None, help="Only this namespace (default: every namespace).")
@click.option(
    "--state",
    "with_state",
    is_flag=True,
    help="Include each checkpoint's state (JSON output only).",
)
@json_option
def show_thread(
    url: str, thread_id: str, namespace: str | None, with_state: bool, as_json: bool
) -> None:
    """Show one thread's checkpoints, oldest first."""
    with friendly_errors(), open_store(url) as store:
        record = store.thread(thread_id)
        if record is None:
            raise click.ClickException(
                f"no thread {thread_id!r} in {store!r}; list threads with `durability threads list`"
            )
        history = store.history(thread_id, namespace, keep_sealed=not with_state)
        park = park_of(store, thread_id)
    if as_json:
        checkpoints = [_checkpoint_json(cp, with_state) for cp in history]
        print_json(
            {"thread": _record_json(record), "park": _park_json(park), "checkpoints": checkpoints}
        )
    else:
        _print_thread(record, park, history)


def _checkpoint_json(cp: Checkpoint, with_state: bool) -> dict[str, Any]:
    row = {k: getattr(cp, k) for k in _CHECKPOINT_FIELDS}
    if with_state:
        from durability.cli._common import to_jsonable

        row["state"] = to_jsonable(cp.state)
    return row


def _print_thread(record: ThreadRecord, park: Park | None, history: list[Checkpoint]) -> None:
    """The thread's totals, its finished mark and park, and its checkpoints, for people."""
    click.echo(
        f"thread {record.thread_id}: {record.checkpoints} checkpoints, "
        f"{format_bytes(record.size_bytes)}, owner {record.owner or '-'}"
    )
    if record.finished_at:
        due = record.due_at.isoformat() if record.due_at else "-"
        click.echo(f"finished at {record.finished_at.isoformat()}, due for the sweep at {due}")
    if park is not None:
        click.echo(f"parked: {park.reason!r}, deadline {park.deadline.isoformat()}")
    print_table(
        ["seq", *CHECKPOINT_COLUMNS, "bytes"],
        [
            (
                c.seq,
                c.checkpoint_id,
                c.namespace,
                c.run_id,
                c.node_id,
                c.step,
                c.step_type,
                status_word(c.status),
                c.created_at,
                format_bytes(c.size_bytes or 0),
            )
            for c in history
        ],
    )


@threads.command("delete")
@url_argument
@click.argument("thread_id")
@click.option("--force", is_flag=True, help="Delete even checkpoints the plane does not have yet.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def delete_thread(url: str, thread_id: str, force: bool, yes: bool, as_json: bool) -> None:
    """Delete one thread: every checkpoint, pending write, park and ledger record.

    In a store that replicates (connected at least once, even if disconnected since, and not
    forgotten with `durability outbox forget`), refuses while the plane lacks some of the
    thread's checkpoints (pending or quarantined), unless --force.
    """
    with friendly_errors(), open_store(url) as store:
        if store.thread(thread_id) is None:
            raise click.ClickException(f"no thread {thread_id!r} in {store!r}; nothing to delete")
        if store.replicates and not force:
            states = [e.state for e in store.outbox(thread_id=thread_id)]
            pending, quarantined = states.count("pending"), states.count("quarantined")
            if pending + quarantined:
                raise click.ClickException(
                    f"refusing to delete thread {thread_id!r}: the plane does not have "
                    f"{pending + quarantined} of its checkpoints yet ({pending} pending, "
                    f"{quarantined} quarantined); let a connected drain send them (see `durability "
                    "outbox status`), or pass --force to delete them anyway"
                )
        if not yes and not as_json:
            click.confirm(f"Delete thread {thread_id!r} from {store!r}?", abort=True)
        deleted = store.delete_thread(thread_id)
    if as_json:
        print_json(
            {"thread_id": thread_id, "checkpoints": deleted.checkpoints, "writes": deleted.writes}
        )
    else:
        click.echo(
            f"deleted thread {thread_id}: {deleted.checkpoints} checkpoints, {deleted.writes} pending writes"
        )


@threads.command("mark")
@url_argument
@click.argument("thread_ids", nargs=-1, required=True)
@click.option("--owner", default=None, help="Record a run start by this owner first.")
@click.option("--undo", is_flag=True, help="Take the threads out of the finished set instead.")
@json_option
def mark_threads(
    url: str, thread_ids: tuple[str, ...], owner: str | None, undo: bool, as_json: bool
) -> None:
    """Mark threads finished (due for the sweep after the finished retention), or --undo.

    On a LangGraph store (opened with ?writable=true) the marks go to durability's sidecar
    ledger beside it; LangGraph's own tables are not touched.
    """
    marked = []
    with friendly_errors(), open_store(url) as store:
        for thread_id in thread_ids:
            if owner is not None:
                store.record_run_start(thread_id, run_id="", owner=owner)
            if undo:
                store.unmark_finished(thread_id)
                marked.append({"thread_id": thread_id, "finished_at": None, "due_at": None})
            else:
                r = store.mark_finished(thread_id)
                marked.append(
                    {"thread_id": thread_id, "finished_at": r.finished_at, "due_at": r.due_at}
                )
    if as_json:
        print_json(marked)
    else:
        print_table(["thread", "finished", "due"], [tuple(m.values()) for m in marked])


#: A checkpoint's fields in ``--json`` output: its seq, then every stored field but the payloads.
_CHECKPOINT_FIELDS = ("seq", *ID_FIELDS, *SCALAR_FIELDS, "size_bytes")


def _record_json(r: object) -> dict[str, object]:
    from dataclasses import asdict

    data = asdict(r)  # type: ignore[call-overload]
    return dict(data)


def _park_json(park: object) -> object:
    from dataclasses import asdict

    return None if park is None else asdict(park)  # type: ignore[call-overload]
