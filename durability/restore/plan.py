"""A restore's plan: what the plane holds of a thread, mapped back to exact checkpoints, its park
and ledger record rebuilt, and what the local store already holds, compared. Reads only.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability.clock import parse_aware
from durability.errors import (
    CapabilityError,
    CheckpointStoreFormatError,
    ParkRefused,
    RestoreError,
)
from durability.model import (
    FAILED,
    INTERRUPTED,
    PARK_DEADLINE,
    RUN_METADATA,
    STEP_LANGGRAPH,
    Checkpoint,
    Deleted,
    Lease,
    Park,
)
from durability.settings import format_duration, waiting_horizon
from durability.stores.base import Store
from durability.stores.ids import check_id
from durability.stores.ledger import lease_held_message
from durability.stores.parks import park_of

if TYPE_CHECKING:
    import pandas as pd

    from durability.replication.client import PlaneClient
    from durability.replication.connection import Connection


log = logging.getLogger("durability.restore")


#: The deployment-wide switch for resume-time restore (an erasure request must be honoured by
#: every worker, so it is not a per-call argument).
ENV_RESTORE = "DURABILITY_RESTORE_FROM_PLANE"


_OFF = frozenset({"0", "false", "no", "off"})


_ON = frozenset({"1", "true", "yes", "on"})


#: How long a restore holds the thread's lease while it writes (on the store's clock).
RESTORE_LEASE = timedelta(seconds=60)


#: Columns of :meth:`RestorePlan.to_frame`.
FRAME_COLUMNS = (
    "order",
    "checkpoint_id",
    "namespace",
    "run_id",
    "runner",
    "node_id",
    "step",
    "step_type",
    "status",
    "created_at",
    "park_deadline",
    "deadline_source",
    "note",
)


#: Where a plan's rows came from: the plane's history, or its latest checkpoint alone.
SOURCE_HISTORY = "history"


SOURCE_LATEST = "latest"


def restore_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether resume-time restore is allowed by ``DURABILITY_RESTORE_FROM_PLANE``.

    Unset, empty or blank: on. ``1``/``true``/``yes``/``on``: on. ``0``/``false``/``no``/``off``:
    off. The value is trimmed and compared without case. Any other value is off too, with a
    WARNING (fail closed: a typo in a switch set to honour an erasure request must not restore).
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_RESTORE)
    value = (raw or "").strip().lower()
    if not value or value in _ON:
        return True
    if value not in _OFF:
        log.warning(
            "%s=%r is not one of 0/false/no/off or 1/true/yes/on; restore from the plane stays "
            "off (fail closed). Set it to off or unset it.",
            ENV_RESTORE,
            (raw or "")[:40],
        )
    return False


def connections_for(store: Store) -> list[Connection]:
    """This process's active connections of ``store``'s database (one per project).

    No network call, and no import of the HTTP stack: a process that never imported the
    replication connections cannot have one.
    """
    module = sys.modules.get("durability.replication.connection")
    if module is None:
        return []
    key = module.database_key(store)
    found: list[Connection] = [
        c for c in module.active_connections() if c.active and module.database_key(c.store) == key
    ]
    return found


@dataclass(frozen=True, slots=True)
class LocalThread:
    """What a store already holds of a thread a restore would replace.

    ``unsynced`` counts rows the plane may not have (pending or quarantined in the outbox):
    what an overwrite would lose for good. ``lease`` is a live lease (a run in flight).
    """

    checkpoints: int
    unsynced: int = 0
    park: Park | None = None
    lease: Lease | None = None
    newest_at: datetime | None = None

    def describe(self) -> str:
        """One line for messages."""
        parts = [f"{self.checkpoints} checkpoint(s)"]
        if self.unsynced:
            parts.append(f"{self.unsynced} of them not on the plane")
        if self.park is not None:
            parts.append(f"a pending park ({self.park.reason!r})")
        if self.lease is not None:
            parts.append(f"a live lease held by {self.lease.holder!r}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What a restore of one thread would write; a pure value (nothing is written making it).

    Attributes:
        thread_id: The thread.
        target: The plane's URL.
        source: ``history`` (the thread's whole history) or ``latest`` (a plane that serves only
            the latest checkpoint).
        checkpoints: The rows to write, in write order: each keeps its id, node, step type,
            status and ``created_at``; the last is the latest.
        park: The park to re-create (its ``deadline_source`` is ``declared`` or ``horizon``), or
            ``None``.
        owner: The thread's owner from the rows' run facts, recorded in the ledger (``None``: not
            a runner's thread, no ledger record is written).
        marks_finished: Whether the thread is marked finished again (a minted or flow-owned
            thread whose run ended).
        local: What the store already holds of the thread (``None``: nothing); applying refuses
            unless ``overwrite=True``.
        refusal: Why applying will refuse whatever the options (a store in another format
            generation, a park the store cannot hold), or ``None``.
        warnings: Everything worth reading before applying, one sentence each.
        notes: Per checkpoint id, what is special about that row (``state-stripped: …`` for a
            run end that reached the plane without its state).
        planned_at: The store's clock when the plan was made.
    """

    thread_id: str
    target: str
    source: str
    checkpoints: tuple[Checkpoint, ...] = ()
    park: Park | None = None
    owner: str | None = None
    marks_finished: bool = False
    local: LocalThread | None = None
    refusal: str | None = None
    warnings: tuple[str, ...] = ()
    notes: Mapping[str, str] = field(default_factory=dict)
    planned_at: datetime | None = None

    @property
    def empty(self) -> bool:
        """True when the plane holds nothing of the thread (applying writes nothing)."""
        return not self.checkpoints

    @property
    def latest(self) -> Checkpoint | None:
        """The checkpoint a resume would continue from (the last one written)."""
        return self.checkpoints[-1] if self.checkpoints else None

    def refusal_with(self, *, overwrite: bool = False) -> str | None:
        """Why :func:`apply_restore` with ``overwrite`` would refuse the plan, as the store stood
        when it was planned, or ``None`` (what a dry run reports; applying checks again)."""
        if self.refusal is not None:
            return self.refusal
        local = self.local
        if local is not None and local.lease is not None:
            return lease_held_message(self.thread_id, local.lease)
        if local is not None and not overwrite:
            return _held_locally(self.thread_id, local)
        return None

    def rows(self) -> list[dict[str, Any]]:
        """One dict per checkpoint, in write order, with :data:`FRAME_COLUMNS` as keys."""
        out = []
        for order, cp in enumerate(self.checkpoints, start=1):
            parks = self.park is not None and cp is self.checkpoints[-1]
            out.append(
                {
                    "order": order,
                    "checkpoint_id": cp.checkpoint_id,
                    "namespace": cp.namespace,
                    "run_id": cp.run_id,
                    "runner": cp.runner,
                    "node_id": cp.node_id,
                    "step": cp.step,
                    "step_type": cp.step_type,
                    "status": cp.status,
                    "created_at": cp.created_at,
                    "park_deadline": self.park.deadline if parks and self.park else None,
                    "deadline_source": self.park.deadline_source if parks and self.park else None,
                    "note": self.notes.get(cp.checkpoint_id),
                }
            )
        return out

    def to_frame(self) -> pd.DataFrame:
        """The plan as a DataFrame, one row per checkpoint in write order.

        Columns: ``order`` (1-based write order), ``checkpoint_id``, ``namespace``, ``run_id``,
        ``runner``, ``node_id``, ``step``, ``step_type``, ``status``, ``created_at`` (aware
        UTC), ``park_deadline`` and ``deadline_source`` (on the row that gets the park, else
        empty) and ``note`` (``state-stripped: …`` for a run end that reached the plane without
        its state). ``frame.attrs`` holds ``thread_id``, ``target``, ``source``, ``warnings``
        and ``refusal``.
        """
        import pandas as pd

        frame = pd.DataFrame(self.rows(), columns=list(FRAME_COLUMNS))
        frame.attrs.update(
            thread_id=self.thread_id,
            target=self.target,
            source=self.source,
            warnings=list(self.warnings),
            refusal=self.refusal,
        )
        return frame

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (what ``durability restore --json`` prints)."""
        return {
            "thread_id": self.thread_id,
            "target": self.target,
            "source": self.source,
            "checkpoints": self.rows(),
            "park": None if self.park is None else _park_dict(self.park),
            "owner": self.owner,
            "marks_finished": self.marks_finished,
            "local": None if self.local is None else _local_dict(self.local),
            "refusal": self.refusal,
            "warnings": list(self.warnings),
            "planned_at": self.planned_at,
        }


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What :func:`apply_restore` wrote.

    ``checkpoints`` are the stored copies (``seq`` filled), in write order; ``park`` the
    re-created park; ``replaced`` what an overwrite found locally and ``deleted`` what it removed.
    """

    thread_id: str
    checkpoints: tuple[Checkpoint, ...] = ()
    park: Park | None = None
    replaced: LocalThread | None = None
    deleted: Deleted | None = None
    warnings: tuple[str, ...] = ()

    @property
    def latest(self) -> Checkpoint | None:
        """The last checkpoint written (what a resume continues from), or ``None``."""
        return self.checkpoints[-1] if self.checkpoints else None


def plan_restore(
    store: Store,
    thread_id: str,
    connection: Connection | None = None,
    *,
    client: PlaneClient | None = None,
    project_id: str | None = None,
) -> RestorePlan:
    """Plan a restore of ``thread_id`` into ``store`` from the plane: read everything, write nothing.

    Args:
        store: The store to restore into (read only here).
        thread_id: The thread (the plane's execution id).
        connection: The connection to read through; default: this process's active connection
            of the store (the first that has the thread, when there are several projects).
        client: A :class:`~durability.replication.PlaneClient` to read through instead (what the
            CLI uses: no connection is recorded in the store).
        project_id: The local project stamped on rows the plane got from another client (the
            fastaiagent SDK); default the connection's. Rows this project sent keep their own.

    Raises:
        RestoreError: Not connected (no client, no active connection), or the plane could not be
            read (unreachable, refused the key, answered with something that is not a checkpoint).
    """
    check_id(thread_id, "thread_id", action="plan a restore")
    if client is not None:
        return _plan(store, thread_id, client, project_id or "", {})
    candidates = [connection] if connection is not None else connections_for(store)
    active = [c for c in candidates if c is not None and c.active]
    if not active:
        raise RestoreError(
            f"cannot plan a restore of thread {thread_id[:80]!r}: {store!r} is not connected to a "
            "plane; pass connection= (replication.connect(store, target, api_key)) or client="
        )
    plan: RestorePlan | None = None
    for conn in active:
        plan = _plan(
            store,
            thread_id,
            conn.client,
            project_id if project_id is not None else conn.project_id,
            {conn.encoder.name: conn.encoder},
        )
        if not plan.empty:
            return plan
    assert plan is not None
    return plan


def _plan(
    store: Store,
    thread_id: str,
    client: PlaneClient,
    project_id: str,
    encoders: Mapping[str, Any],
) -> RestorePlan:
    warnings: list[str] = []
    refusal, local = _local_checks(store, thread_id, warnings)
    items, source = _fetch(client, thread_id)
    now = store.clock()
    if not items:
        return RestorePlan(
            thread_id, client.target, source, local=local, refusal=refusal, planned_at=now
        )
    rows, notes = _decode(items, project_id, encoders, warnings)
    last = rows[-1]
    _last_checkpoint_warnings(last, source, client.target, warnings)
    park = _park_of(store, last, now, warnings)
    if park is not None and refusal is None:
        refusal = _park_refusal(store, park)
        if refusal is not None:
            warnings.append(refusal)
    owner, marks_finished = _ledger_of(rows)
    return RestorePlan(
        thread_id,
        client.target,
        source,
        checkpoints=tuple(rows),
        park=park,
        owner=owner,
        marks_finished=marks_finished,
        local=local,
        refusal=refusal,
        warnings=tuple(warnings),
        notes=notes,
        planned_at=now,
    )


def _fetch(client: PlaneClient, thread_id: str) -> tuple[list[Any], str]:
    """The plane's items of the thread (its history, else its latest) and which it served."""
    from durability.errors import ReplicationError

    try:
        latest = client.latest(thread_id)
        pages = None if latest is None else client.iter_history(thread_id)
        items = [] if latest is None else ([latest] if pages is None else list(pages) or [latest])
    except ReplicationError as exc:
        if isinstance(exc, RestoreError):  # a path the plane's router could not route
            raise
        raise RestoreError(
            f"cannot restore thread {thread_id[:80]!r}: {exc}"
            + (f"; {exc.hint}" if exc.hint else "")
        ) from exc
    return items, SOURCE_HISTORY if pages is not None else SOURCE_LATEST


def _decode(
    items: list[Any], project_id: str, encoders: Mapping[str, Any], warnings: list[str]
) -> tuple[list[Checkpoint], dict[str, str]]:
    """The items as checkpoints (each once) and notes on those that arrived state-stripped."""
    from durability.replication.wire import checkpoint_from_wire, is_durability_item, was_stripped

    rows: list[Checkpoint] = []
    notes: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    for item in items:
        cp = checkpoint_from_wire(item, encoders=encoders)
        if (cp.namespace, cp.checkpoint_id) in seen:
            # One checkpoint the plane holds under two wire ids (sent before and after the
            # plane announced how it keys rows): the first stored is the one kept.
            continue
        seen.add((cp.namespace, cp.checkpoint_id))
        if not is_durability_item(item):
            cp = cp.evolve(project_id=project_id)
        stripped = was_stripped(item)
        if stripped:
            notes[cp.checkpoint_id] = f"state-stripped: {stripped}"
            warnings.append(
                f"the run end {cp.checkpoint_id[:80]!r} reached the plane state-stripped "
                f"({stripped[:200]}): its restored state holds only the run's outcome"
            )
        rows.append(cp)
    return rows, notes


def _last_checkpoint_warnings(
    last: Checkpoint, source: str, target: str, warnings: list[str]
) -> None:
    """What the restored thread's last checkpoint means for a resume or a fork."""
    if source == SOURCE_LATEST:
        warnings.append(
            f"the plane {target} serves only the latest checkpoint (no history): only it is "
            "restored, so no earlier step can be forked from"
            + (
                ", and this failed run cannot be resumed (nothing before its run end)"
                if last.is_run_end and last.status == FAILED
                else ""
            )
        )
    if last.is_run_end and last.status != FAILED:
        warnings.append(
            f"its run {last.run_id[:80]!r} completed: a resume will refuse it (fork it to continue)"
        )


def _held_locally(thread_id: str, local: LocalThread) -> str:
    """Why a restore without ``overwrite`` refuses a thread the store holds."""
    return (
        f"the store already holds thread {thread_id[:80]!r} ({local.describe()}), and the "
        "local copy is the source of truth on its own machine; pass overwrite=True (CLI: "
        "--overwrite) to replace it with the plane's copy, or delete it first (durability "
        "threads delete)"
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _local_checks(
    store: Store, thread_id: str, warnings: list[str]
) -> tuple[str | None, LocalThread | None]:
    """The store's side of a plan: its format generation, and what it holds of the thread."""
    try:
        store.ready()
    except CheckpointStoreFormatError as exc:
        warnings.append(str(exc))
        return str(exc), None
    # An erased thread is never brought back, whatever the restore switch says for others.
    store.refuse_erased(thread_id, "restore a thread")
    local = local_thread(store, thread_id)
    if local is not None:
        warnings.append(
            f"{store!r} already holds thread {thread_id[:80]!r} ({local.describe()}): the local "
            "copy is the source of truth on its own machine; applying refuses unless "
            "overwrite=True, which replaces it with the plane's copy"
        )
    return None, local


def local_thread(store: Store, thread_id: str, *, holder: str | None = None) -> LocalThread | None:
    """What ``store`` holds of the thread (``None``: no checkpoint of it).

    ``holder``: the caller's own lease, not reported as someone else's.
    """
    if not store.has_thread(thread_id):
        return None
    record = store.thread(thread_id)
    now = store.clock()
    unsynced = 0
    if store.outbox is not None:
        unsynced = sum(1 for e in store.outbox.entries(thread_id=thread_id) if e.state != "synced")
    lease = record.lease if record is not None else None
    if lease is not None and (lease.holder == holder or not lease.live(now)):
        lease = None
    return LocalThread(
        checkpoints=record.checkpoints if record is not None else 0,
        unsynced=unsynced,
        park=park_of(store, thread_id),
        lease=lease,
        newest_at=record.newest_at if record is not None else None,
    )


def _park_of(store: Store, cp: Checkpoint, now: datetime, warnings: list[str]) -> Park | None:
    """The park an interrupted latest checkpoint needs back, with its deadline and where it came from."""
    if cp.status != INTERRUPTED or cp.step_type == STEP_LANGGRAPH:
        return None  # a LangGraph interrupt lives in its pending writes, not in a park
    horizon = waiting_horizon(store.settings)
    latest_allowed = now + horizon
    declared = parse_aware(_dict(_dict(cp.metadata).get(RUN_METADATA)).get(PARK_DEADLINE))
    if declared is not None and declared <= latest_allowed:
        deadline, source = declared, "declared"
    else:
        paused = min(cp.created_at or now, now)
        deadline, source = paused + horizon, "horizon"
        why = (
            f"its declared deadline {declared.isoformat()} is past this store's waiting horizon"
            if declared is not None
            else "the plane carries no deadline"
        )
        warnings.append(
            f"{why}: the park takes the thread's waiting horizon, {deadline.isoformat()} (the "
            f"pause at {paused.isoformat()} + {format_duration(horizon)} of waiting retention)"
        )
    if deadline <= now:
        warnings.append(
            f"the park's deadline {deadline.isoformat()} has passed: the run can still be answered "
            "while the thread exists, but the sweep may remove it"
        )
    return Park(
        thread_id=cp.thread_id,
        deadline=deadline,
        run_id=cp.run_id,
        checkpoint_id=cp.checkpoint_id,
        node_id=cp.node_id,
        runner=cp.runner,
        reason=cp.interrupt_reason or "",
        context=cp.interrupt_context,
        created_at=cp.created_at,
        deadline_source=source,
    )


def _park_refusal(store: Store, park: Park) -> str | None:
    """Why ``store`` cannot take the park back (naming the option that would let it), or ``None``."""
    try:
        if store.parks is None:
            raise store.missing("parks", f"park thread {park.thread_id[:80]!r}")
        store.parks.check_can_park(park.thread_id)
    except (ParkRefused, CapabilityError) as exc:
        return (
            f"cannot restore thread {park.thread_id[:80]!r} into {store!r}: its run is parked at "
            f"step {park.node_id[:80]!r} ({park.reason[:80]!r}), and {exc}"
        )
    return None


def _ledger_of(rows: Sequence[Checkpoint]) -> tuple[str | None, bool]:
    """The thread's owner from its root rows' run facts, and whether its ended run marks it finished."""
    root = [cp for cp in rows if cp.namespace == ""]
    if not root:
        return None, False
    last = root[-1]
    facts = _dict(_dict(last.metadata).get(RUN_METADATA))
    owner = facts.get("owner")
    if not isinstance(owner, str) or not owner:
        return None, False
    owns_thread = bool(facts.get("minted")) or facts.get("kind") == "flow"
    return owner, last.is_run_end and owns_thread


def _park_dict(park: Park) -> dict[str, Any]:
    return {
        "checkpoint_id": park.checkpoint_id,
        "run_id": park.run_id,
        "node_id": park.node_id,
        "reason": park.reason,
        "deadline": park.deadline,
        "deadline_source": park.deadline_source,
    }


def _local_dict(local: LocalThread) -> dict[str, Any]:
    return {
        "checkpoints": local.checkpoints,
        "unsynced": local.unsynced,
        "park": None if local.park is None else _park_dict(local.park),
        "lease_holder": None if local.lease is None else local.lease.holder,
        "newest_at": local.newest_at,
    }
