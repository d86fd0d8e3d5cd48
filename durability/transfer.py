"""Copy threads between any two stores: ``durability.copy(src, dst)`` / ``durability copy``.

The source is any store durability opens — its own (memory, SQLite, Postgres, Redis), a
LangGraph or fastaiagent store read in place, an archive; the destination is a durability
store, or a LangGraph store opened ``?writable=true``, written through LangGraph's own saver
(:mod:`durability.stores.foreign.langgraph_copy` says what that keeps and what it refuses). It works as plan → apply: :func:`plan_copy` reads both stores and says, per thread,
what copying would do; :func:`copy` computes the same plan, refuses before writing anything
when a thread conflicts, then copies.

What is kept: thread ids (unless renamed), namespaces, checkpoint ids and their write order,
parents, status, every payload, run ends (they are checkpoints), pending writes, and — when both
stores keep a ledger — the run start, declared retention and finished mark with their times.
Leases and parks are not copied (a lease belongs to a live process; a park to the store whose
workers resume it). Between two durability stores rows are copied as the codec keeps them,
never decoded; from a foreign store they are mapped (see its reader) and encoded once. Sealed
states and write values (customer-held encryption) are re-sealed when a copy renames the thread
(their associated data binds it), and clear ones are sealed when the destination encrypts
(:func:`durability.stores.sealing.carry_checkpoint`).

Per thread, against the destination:

* ``copy``: the destination does not hold the thread;
* ``resume``: it holds the first checkpoints of the source's thread, in the same order (an
  earlier copy was killed, or the source has grown since): the rest is copied;
* ``skip``: it already holds every checkpoint;
* ``refuse``: it holds something else under that id. The copy refuses before writing anything
  unless ``rename`` gives the copies other ids (``rename="{thread_id}-copy"``). Into a LangGraph
  store a thread is refused too when LangGraph's tables have no place for part of it, unless
  that part may be dropped and ``lossy=True`` says so.

A thread is copied in chunks of ``chunk_size`` checkpoints, each chunk's pending writes first
(idempotent: LangGraph's rules keep the first value), then its checkpoints in one transaction;
a copy killed at any point is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from durability.clock import as_utc
from durability.errors import ConfigError, CopyRefused
from durability.model import STEP_RUN_END, Checkpoint, PendingWrite, ThreadRecord
from durability.settings import Retention
from durability.stores.base import Store
from durability.stores.rows import EncodedCheckpoint, EncodedWrite, Select
from durability.stores.sealing import carry_checkpoint, carry_write

if TYPE_CHECKING:
    import pandas as pd

#: What copying does with a thread (see the module).
COPY_ACTIONS = ("copy", "resume", "skip", "refuse")

#: Checkpoints per destination transaction.
DEFAULT_CHUNK = 2000

_HELD = "the destination holds other checkpoints under this id"


@dataclass(frozen=True, slots=True)
class CopyRow:
    """What copying does with one source thread: ``target`` is its id in the destination."""

    thread_id: str
    target: str
    action: str
    checkpoints: int
    present: int
    reason: str


@dataclass(frozen=True)
class CopyPlan:
    """One row per selected source thread, in thread id order (``ledgers``: the source's ledger
    records of those threads that have one, as the plan read them, for the copy to carry)."""

    source: str
    destination: str
    rows: tuple[CopyRow, ...]
    ledgers: dict[str, ThreadRecord] = field(default_factory=dict, repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """Threads per action, and the checkpoints the copy would write."""
        counts = {a: sum(r.action == a for r in self.rows) for a in COPY_ACTIONS}
        writing = sum(
            r.checkpoints - r.present for r in self.rows if r.action in ("copy", "resume")
        )
        return {
            "source": self.source,
            "destination": self.destination,
            "threads": len(self.rows),
            "counts": counts,
            "checkpoints": writing,
        }

    def to_frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (one column per :class:`CopyRow` field)."""
        import pandas as pd

        names = list(CopyRow.__dataclass_fields__)
        return pd.DataFrame([[getattr(r, n) for n in names] for r in self.rows], columns=names)


@dataclass(frozen=True)
class CopyResult:
    """What a copy wrote: per thread copied or resumed, the checkpoints and writes it added."""

    plan: CopyPlan
    copied: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def checkpoints(self) -> int:
        return sum(c for c, _ in self.copied.values())

    @property
    def writes(self) -> int:
        return sum(w for _, w in self.copied.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the plan's summary and what was written (``durability copy --json``)."""
        return {
            **self.plan.summary(),
            "copied": {
                t: {"checkpoints": c, "writes": w} for t, (c, w) in sorted(self.copied.items())
            },
            "totals": {"checkpoints": self.checkpoints, "writes": self.writes},
        }


def plan_copy(
    source: Store | str,
    destination: Store | str,
    *,
    threads: Sequence[str] | None = None,
    since: datetime | None = None,
    owner: str | None = None,
    rename: str | None = None,
    lossy: bool = False,
) -> CopyPlan:
    """What :func:`copy` would do, writing nothing (arguments as there)."""
    with ExitStack() as stack:
        src, dst = _opened(stack, source), _opened(stack, destination)
        return _plan(src, dst, _Selection(threads, since, owner, rename, lossy))


def copy(
    source: Store | str,
    destination: Store | str,
    *,
    threads: Sequence[str] | None = None,
    since: datetime | None = None,
    owner: str | None = None,
    rename: str | None = None,
    lossy: bool = False,
    progress: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
) -> CopyResult:
    """Copy threads from ``source`` into ``destination`` (stores or URLs); see the module.

    ``threads`` picks thread ids (default: all); ``since`` keeps threads whose newest
    checkpoint is at or after it; ``owner`` those whose ledger names that owner; ``rename`` is
    a template (``"{thread_id}-copy"``) giving every copy another id; ``lossy`` lets a copy
    into a LangGraph store drop what LangGraph's tables have no place for (the plan names it).
    Raises :class:`~durability.errors.CopyRefused` before writing anything when a thread
    conflicts or cannot be carried.
    """
    if chunk_size < 1:
        raise ConfigError(f"cannot copy: chunk_size={chunk_size} must be at least 1")
    with ExitStack() as stack:
        src, dst = _opened(stack, source), _opened(stack, destination)
        plan = _plan(src, dst, _Selection(threads, since, owner, rename, lossy))
        _refuse(src, dst, plan)
        return _apply(src, dst, plan, progress=progress, chunk_size=chunk_size)


def _refuse(src: Store, dst: Store, plan: CopyPlan) -> None:
    """Refuse the whole copy, writing nothing, when any thread is refused."""
    refused = [r for r in plan.rows if r.action == "refuse"]
    held = [r for r in refused if r.reason == _HELD]
    if held:
        names = ", ".join(repr(r.thread_id) for r in held[:5])
        more = f" and {len(held) - 5} more" if len(held) > 5 else ""
        raise CopyRefused(
            f"cannot copy from {src!r} into {dst!r}: the destination already holds other "
            f"checkpoints under {len(held)} thread ids ({names}{more}); nothing was "
            "copied — pass rename='{thread_id}-copy' (--rename) to copy them under new ids, "
            "or leave them out with threads= (--thread)"
        )
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more threads)" if len(refused) > 1 else ""
        raise CopyRefused(
            f"cannot copy thread {first.thread_id[:80]!r} from {src!r} into {dst!r}: "
            f"{first.reason}{more}; nothing was copied"
        )


@dataclass(frozen=True, slots=True)
class _Selection:
    """What to copy and how (the arguments of :func:`copy`)."""

    threads: Sequence[str] | None
    since: datetime | None
    owner: str | None
    rename: str | None
    lossy: bool


# ---------------------------------------------------------------------------- plan


def _opened(stack: ExitStack, store: Store | str) -> Store:
    if isinstance(store, Store):
        return store
    import durability

    return stack.enter_context(durability.open(store))


def _plan(src: Store, dst: Store, how: _Selection) -> CopyPlan:
    into_langgraph = _check_destination(dst)
    rename = how.rename
    if rename is not None and "{thread_id}" not in rename:
        raise ConfigError(
            f"cannot copy: rename={rename!r} must contain {{thread_id}} (e.g. "
            "'{thread_id}-copy'), so that each copy gets its own id"
        )
    when = as_utc(how.since) if how.since is not None else None
    present = {r.thread_id for r in dst.iter_threads() if r.checkpoints}
    rows, ledgers = [], {}
    for record in _selected(src, how.threads, when, how.owner):
        if record.started_at is not None or record.finished_at is not None:
            ledgers[record.thread_id] = record
        row = _row(
            src, dst, present, record, rename.format(thread_id=record.thread_id) if rename else None
        )
        if into_langgraph and row.action in ("copy", "resume"):
            row = _carried_into_langgraph(src, dst, row, how.lossy)
        rows.append(row)
    return CopyPlan(repr(src), repr(dst), tuple(rows), ledgers)


def _check_destination(dst: Store) -> bool:
    """Refuse a destination copies cannot go into; ``True`` for a (writable) LangGraph store."""
    from durability.stores.foreign.base import ForeignStore
    from durability.stores.foreign.langgraph import LangGraphStore

    if isinstance(dst, LangGraphStore):
        if not dst.writable:
            raise dst.refuse("copy threads into it")
        return True
    if isinstance(dst, ForeignStore):
        raise CopyRefused(
            f"cannot copy into {dst!r}: the destination must be a durability store (memory, "
            "sqlite, postgres or redis) or a LangGraph store opened ?writable=true; a "
            f"{dst.source} store is only read"
        )
    return False


def _carried_into_langgraph(src: Store, dst: Store, row: CopyRow, lossy: bool) -> CopyRow:
    """``row`` refused when LangGraph's tables cannot take all of the thread (see
    :mod:`durability.stores.foreign.langgraph_copy`), or noting what ``lossy`` drops."""
    from durability.stores.foreign.langgraph import LangGraphStore
    from durability.stores.foreign.langgraph_copy import check_thread

    assert isinstance(dst, LangGraphStore)
    verdict = check_thread(src, dst, row.thread_id)
    if verdict.never is not None:
        return replace(row, action="refuse", reason=verdict.never)
    if not verdict.lost:
        return row
    if not lossy:
        return replace(
            row,
            action="refuse",
            reason=f"LangGraph's tables have no place for {verdict.describe()}; pass "
            "lossy=True (--lossy) to copy without them",
        )
    return replace(row, reason=f"{row.reason}; dropped: {verdict.describe()}")


def _selected(
    src: Store, threads: Sequence[str] | None, since: datetime | None, owner: str | None
) -> Iterator[ThreadRecord]:
    if threads is not None:
        records: Iterator[ThreadRecord] = iter(
            [r for t in sorted(set(threads)) if (r := src.thread(t)) is not None]
        )
    else:
        records = src.iter_threads()
    for record in records:
        if since is not None and (record.newest_at is None or record.newest_at < since):
            continue
        if owner is not None and record.owner != owner:
            continue
        yield record


def _row(
    src: Store, dst: Store, present: set[str], record: ThreadRecord, renamed: str | None
) -> CopyRow:
    target = renamed or record.thread_id
    held = _ids(dst, target) if target in present else []
    row = CopyRow(record.thread_id, target, "copy", record.checkpoints, len(held), "")
    if not held:
        return replace(row, reason="not in the destination")
    # A LangGraph store never holds run ends (a lossy copy drops them): compared without them.
    ours = _ids(src, record.thread_id, run_ends=_keeps_run_ends(dst))
    return _classify(row, ours, held, ordered=_keeps_order(dst))


def _ids(store: Store, thread_id: str, *, run_ends: bool = True) -> list[tuple[str, str]]:
    """``(namespace, checkpoint_id)`` of the thread's checkpoints in write order (no payloads)."""
    found: list[tuple[int, str, str]] = []
    columns = ("namespace", "checkpoint_id", "seq", "step_type")
    for chunk in store.checkpoint_columns(thread_id, columns=columns):
        found += (
            (seq, ns, cid)
            for seq, ns, cid, kind in zip(
                chunk["seq"].tolist(),
                chunk["namespace"].tolist(),
                chunk["checkpoint_id"].tolist(),
                chunk["step_type"].tolist(),
                strict=True,
            )
            if run_ends or kind != STEP_RUN_END
        )
    return [(ns, cid) for _, ns, cid in sorted(found)]


def _keeps_run_ends(dst: Store) -> bool:
    """Whether the store can hold run ends (LangGraph's tables cannot)."""
    return not dst.provider.startswith("langgraph")


def _keeps_order(dst: Store) -> bool:
    """Whether the store keeps write order (LangGraph's Postgres tables order by id only)."""
    return dst.provider != "langgraph-postgres"


def _classify(
    row: CopyRow, source_ids: list[tuple[str, str]], held: list[tuple[str, str]], *, ordered: bool
) -> CopyRow:
    if not ordered:  # compared as sets: the destination cannot say in which order it got them
        held, source_ids = sorted(held), sorted(source_ids[: len(held)]) + source_ids[len(held) :]
    if held == source_ids:
        return replace(
            row, action="skip", reason="already copied: the destination holds every checkpoint"
        )
    if held == source_ids[: len(held)]:
        return replace(
            row,
            action="resume",
            reason=f"the destination holds its first {len(held)} checkpoints: the rest is copied",
        )
    return replace(row, action="refuse", reason=_HELD)


# ---------------------------------------------------------------------------- apply


def _apply(
    src: Store, dst: Store, plan: CopyPlan, *, progress: bool, chunk_size: int
) -> CopyResult:
    from tqdm.auto import tqdm

    result = CopyResult(plan)
    total = sum(r.checkpoints for r in plan.rows if r.action != "skip")
    with ExitStack() as stack:
        copier, batch = _copier(stack, src, dst, chunk_size)
        bar = stack.enter_context(tqdm(total=total, unit="ckpt", desc="copy", disable=not progress))
        for row in plan.rows:
            if row.action in ("copy", "resume"):
                result.copied[row.thread_id] = copier(row, bar)
            # After the thread's rows are in (a batch may still hold them).
            batch.then(partial(_copy_ledger, src, dst, row, plan.ledgers.get(row.thread_id)))
        batch.flush()  # not on the way out of an error: what waits then was never promised
    return result


def _copier(
    stack: ExitStack, src: Store, dst: Store, chunk_size: int
) -> tuple[Callable[[CopyRow, Any], tuple[int, int]], _Batch]:
    """How one thread is copied, and what ends the copy: stored rows between durability stores
    (batched across threads into the destination's bulk load when it has one, the last batch
    written at the end), checkpoints through LangGraph's saver into a LangGraph store."""
    from durability.stores.foreign.langgraph import LangGraphStore

    batch = _Batch(dst, chunk_size)
    if not isinstance(dst, LangGraphStore):
        return (lambda row, bar: _copy_thread(src, dst, row, chunk_size, bar, batch)), batch
    from durability.stores.foreign.langgraph_copy import LangGraphWriter

    writer = LangGraphWriter(dst)
    stack.callback(writer.close)
    return (lambda row, bar: _copy_into_langgraph(src, writer, row, chunk_size, bar)), batch


def _copy_into_langgraph(
    src: Store, writer: Any, row: CopyRow, chunk_size: int, bar: Any
) -> tuple[int, int]:
    # Run ends are dropped (the plan refused them unless lossy); resumed past what is held.
    history = [c for c in src.history(row.thread_id, None) if not c.is_run_end]
    if row.present:  # the first checkpoints in write order are there (compared as sets)
        bar.update(row.present)
    written = [0, 0]
    try:
        for start in range(row.present, len(history), chunk_size):
            chunk = history[start : start + chunk_size]
            keys = [(c.namespace, c.checkpoint_id) for c in chunk]
            put = writer.put_chunk(row.target, chunk, src.writes_of(row.thread_id, keys))
            written[0] += put[0]
            written[1] += put[1]
            bar.update(len(chunk))
    finally:
        writer.end_thread()
    return written[0], written[1]


def _copy_thread(
    src: Store, dst: Store, row: CopyRow, chunk_size: int, bar: Any, batch: _Batch
) -> tuple[int, int]:
    rows = src._select(Select(row.thread_id, None))
    done = row.present
    bar.update(done)
    batch.target = row.target
    written = [0, 0]
    for start in range(done, len(rows), chunk_size):
        chunk = rows[start : start + chunk_size]
        for r in chunk:  # stored rows are not decoded: a damaged one is refused before writing
            if type(r) is EncodedCheckpoint:
                r.check_numbers()
        keys = [(r.namespace, r.checkpoint_id) for r in chunk]
        writes = [w for ws in src._select_writes(row.thread_id, keys).values() for w in ws]
        batch.add(_carried(src, dst, chunk, row.target), _carried(src, dst, writes, row.target))
        written[0] += len(chunk)
        written[1] += len(writes)
        bar.update(len(chunk))
    return written[0], written[1]


class _Batch:
    """Chunks on their way into the destination. Stored rows bound for a store with a bulk
    load wait until ``chunk_size`` checkpoints (of any threads) are there, then go in one
    transaction, writes and checkpoints together: a kill leaves each thread a prefix, as a
    chunk per thread does. Anything else is written at once, its writes first."""

    def __init__(self, dst: Store, chunk_size: int) -> None:
        self.dst, self.chunk_size = dst, chunk_size
        self.checkpoints: list[EncodedCheckpoint] = []
        self.writes: list[EncodedWrite] = []
        self.later: list[Callable[[], None]] = []
        self.target = ""

    def then(self, step: Callable[[], None]) -> None:
        """Run ``step`` once what the batch holds is written (now, when it holds nothing)."""
        if self.checkpoints or self.writes:
            self.later.append(step)
        else:
            step()

    def add(self, checkpoints: list[Any], writes: list[Any]) -> None:
        stored = all(isinstance(r, EncodedCheckpoint) for r in checkpoints) and all(
            isinstance(w, EncodedWrite) for w in writes
        )
        if self.dst.bulk is None or not stored:
            self.flush()
            _put_writes(self.dst, writes, self.target)
            _put_checkpoints(self.dst, checkpoints, self.target)
            return
        self.checkpoints += checkpoints
        self.writes += writes
        if len(self.checkpoints) >= self.chunk_size:
            self.flush()

    def flush(self) -> None:
        if self.checkpoints or self.writes:
            _bulk_load(self.dst, self.checkpoints, self.writes)
            self.checkpoints, self.writes = [], []
        later, self.later = self.later, []
        for step in later:
            step()


def _bulk_load(
    dst: Store, checkpoints: list[EncodedCheckpoint], writes: list[EncodedWrite]
) -> None:
    assert dst.bulk is not None
    dst.ready()
    dst.bulk.load(checkpoints, writes)
    dst.notify_write()


def _carried(src: Store, dst: Store, rows: Sequence[Any], target: str) -> list[Any]:
    """Stored rows (checkpoints or writes) as the destination keeps them (re-sealed if needed)."""
    if dst.bulk is not None and dst.sealer is None and all(r.thread_id == target for r in rows):
        return list(rows)  # nothing to seal or rebind; the bulk load ignores the source's seq
    return [
        carry_checkpoint(src, dst, r, target)
        if isinstance(r, EncodedCheckpoint)
        else carry_write(src, dst, r, target)
        if isinstance(r, EncodedWrite)
        else r
        for r in rows
    ]


def _put_checkpoints(dst: Store, chunk: Sequence[Any], target: str) -> None:
    """One chunk in one transaction (stored rows come from :func:`_carried`, under ``target``)."""
    if chunk and all(isinstance(r, EncodedCheckpoint) for r in chunk):
        dst.ready()
        dst._insert(list(chunk), synced=False)
        dst.notify_write()
        return
    checkpoints: list[Checkpoint] = [r.decode() for r in chunk]
    dst.put_many([replace(cp, thread_id=target, seq=None, size_bytes=None) for cp in checkpoints])


def _put_writes(dst: Store, writes: Sequence[Any], target: str) -> None:
    if not writes:
        return
    if all(isinstance(w, EncodedWrite) for w in writes):
        dst.ready()
        dst._insert_writes([replace(w, thread_id=target) for w in writes])
        return
    decoded: list[PendingWrite] = [w.decode() for w in writes]
    dst.put_writes([replace(w, thread_id=target) for w in decoded])


def _copy_ledger(src: Store, dst: Store, row: CopyRow, record: ThreadRecord | None) -> None:
    """The run start and finished mark, with their times, when both stores keep a ledger."""
    if src.ledger is None or dst.ledger is None or row.action == "refuse" or record is None:
        return
    if record.started_at is not None:
        retention = Retention(waiting=record.declared_waiting, finished=record.declared_finished)
        dst.ledger._start(
            row.target, record.run_id or "", record.owner or "", retention, record.started_at
        )
    if record.finished_at is not None and record.due_at is not None:
        dst.ledger._mark(row.target, record.finished_at, record.due_at)
