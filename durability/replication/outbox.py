"""The drain: one pass of the outbox to the plane, and the thin thread that repeats it.

:func:`drain_once` sends a connection's oldest unsynced rows as batches (capped by rows and by
bytes) until its project has none left or the plane stops taking them:

* a 2xx marks the batch synced, except the ids the plane rejected one by one, which are
  quarantined with its reason (``plane rejected: …``);
* a payload refusal of the whole batch (400, 409, 413, 422) is isolated one offender at a time,
  each quarantined with the reason the plane gave for it: a row the refusal names (this
  project's plane names one) at once, else a row refused alone after halving, one request per
  level (see :meth:`_Pass.isolate`);
* anything else (401, 403, 404, 408, 429, 3xx, 5xx, a transport error) leaves the rows where they
  are, without an age or count bound, and the pass stops; the worker retries on a capped backoff.

Before anything is sent, a row over a cap the plane announced (its state over 1 MiB, a
``step_type`` over 40 characters, …) is quarantined locally, and a row the drain cannot map is
too, so no row can stall the outbox. A run end quarantined either way is followed by a
state-stripped copy of itself (same checkpoint id, empty payloads), so the plane still learns
that the run finished; the original is marked quarantined only once that copy has landed.
Every request records an attempt (and its error) on the rows it carried. POSTs go out on sender
threads, up to ``in_flight`` at once (2 by default), never two carrying one thread, while the
pass fetches and maps the next batch and marks the last (:meth:`_Pass.run`, decision 0155).

:class:`DrainWorker` is the loop: it waits on an event (set by a write, by connect and by
disconnect), runs a pass, and while rows stay buffered retries on a capped exponential backoff.
A write during a pass sets the event again, so the next pass starts at once (no lost wakeup), and
the pass itself fetches again after every batch, so the write is usually sent by the same pass.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durability.model import STEP_RUN_END
from durability.replication.client import REASON_MAX, IngestAnswer
from durability.replication.erasure import send_erase_requests
from durability.replication.wire import ItemRef, WireRow, to_wire
from durability.stores.base import Store
from durability.stores.outbox import RowKey
from durability.stores.rows import EncodedCheckpoint

if TYPE_CHECKING:
    from durability.replication.connection import Connection

logger = logging.getLogger("durability.replication")

_BODY_OPEN = b'{"checkpoints":['
_BODY_CLOSE = b"]}"


@dataclass(frozen=True, slots=True)
class PlaneLimits:
    """Caps the plane announced (``limits`` in its auth-check answer), checked before sending.

    The defaults are the fastaiagent plane's documented caps: a 1 MiB
    ``state_snapshot`` (measured as its JSON on the wire), ``step_type`` of at most 40 characters,
    ``agent_id`` of at most 255.
    """

    state_bytes: int = 1_048_576
    step_type_chars: int = 40
    agent_id_chars: int = 255
    #: The largest request body the plane reads (a batch is cut to fit it).
    body_bytes: int = 64 * 1024 * 1024

    @classmethod
    def announced(cls, limits: Any) -> PlaneLimits:
        """The limits in a plane's announcement; missing or malformed values keep the defaults."""
        if not isinstance(limits, dict):
            return cls()
        values = {
            name: limits[name]
            for name in ("state_bytes", "step_type_chars", "agent_id_chars", "body_bytes")
            if isinstance(limits.get(name), int) and limits[name] > 0
        }
        return cls(**values)

    def violation(self, row: WireRow) -> str | None:
        """Why the plane would refuse this row for its size, or ``None``."""
        if row.state_bytes > self.state_bytes:
            return (
                f"checkpoint {row.checkpoint_id[:80]!r}: state_snapshot is {row.state_bytes} bytes, "
                f"over the plane's {self.state_bytes}-byte cap"
            )
        step_type = row.step_type
        if isinstance(step_type, str) and len(step_type) > self.step_type_chars:
            return f"step_type is {len(step_type)} characters, over the plane's {self.step_type_chars}-character limit"
        agent_id = row.agent_id
        if isinstance(agent_id, str) and len(agent_id) > self.agent_id_chars:
            return f"agent_id is {len(agent_id)} characters, over the plane's {self.agent_id_chars}-character limit"
        return None


@dataclass(slots=True)
class DrainReport:
    """What one drain pass did.

    ``buffered`` counts rows (and erase requests) left in the outbox because the plane could not take them (not
    because of their payload); ``last_error`` is the reason of the last such answer and
    ``retry_after`` the plane's ``Retry-After``, if it sent one.
    """

    synced: int = 0
    quarantined: int = 0
    buffered: int = 0
    #: Erase requests the plane answered in this pass (see :mod:`durability.replication.erasure`).
    erased: int = 0
    requests: int = 0
    bytes_sent: int = 0
    last_error: str | None = None
    retry_after: float | None = None

    def __iadd__(self, other: DrainReport) -> DrainReport:
        self.synced += other.synced
        self.quarantined += other.quarantined
        self.buffered += other.buffered
        self.erased += other.erased
        self.requests += other.requests
        self.bytes_sent += other.bytes_sent
        self.last_error = other.last_error or self.last_error
        self.retry_after = other.retry_after if other.retry_after is not None else self.retry_after
        return self


def supports_outbox(store: Store) -> bool:
    """Whether the store keeps an outbox (a custom store without one simply does not replicate)."""
    return store.outbox is not None


@dataclass(slots=True)
class _Entry:
    """One item of a batch: the row's key, its wire form, and what an ack means for the row."""

    key: RowKey
    row: EncodedCheckpoint
    wire: WireRow
    #: Set for a state-stripped stand-in: the reason the original is quarantined once it lands.
    stand_in_for: str | None = None

    @property
    def ref(self) -> ItemRef:
        """How the plane's answers name this item."""
        return self.wire.ref


@dataclass(slots=True)
class _Outcome:
    synced: list[RowKey] = field(default_factory=list)
    quarantined: dict[RowKey, str] = field(default_factory=dict)
    #: Run ends quarantined by the plane: each gets a state-stripped stand-in.
    refused_ends: list[tuple[_Entry, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Batch:
    """One fetched batch: the entries to send and what mapping it already decided; ``keys``
    empty: every row fetched belongs to a thread a batch in flight carries (wait for it)."""

    keys: set[RowKey]
    entries: list[_Entry]
    out: _Outcome

    @property
    def threads(self) -> set[str]:
        return {thread_id for thread_id, _ in self.keys}


class _Pass:
    """One drain pass over one connection (the state of its batches and bisections).

    POSTs go out on ``sender``, an executor of ``conn.in_flight`` threads, so the pass can
    fetch and map the next batch, and mark the last one, while the plane ingests one or more:
    the client's and the plane's work overlap instead of adding up. Batches in flight never
    carry rows of one thread, so each thread's rows reach the plane oldest first.
    """

    def __init__(self, conn: Connection, sender: Executor) -> None:
        self.conn = conn
        self.sender = sender
        self.report = DrainReport()
        self.seen: set[RowKey] = set()

    # ------------------------------------------------------------------ sending

    def start(self, entries: list[_Entry]) -> Future[IngestAnswer]:
        """Start a POST of these entries on the sender thread."""
        body = _BODY_OPEN + b",".join(e.wire.body for e in entries) + _BODY_CLOSE
        self.report.requests += 1
        self.report.bytes_sent += len(body)
        refs = [e.ref for e in entries]
        return self.sender.submit(self.conn.client.ingest, body, refs)

    def finish(self, entries: list[_Entry], sent: Future[IngestAnswer]) -> IngestAnswer:
        """Wait for a POST's answer and record the attempt on the rows it carried."""
        answer = sent.result()
        store = self.conn.store
        if answer.outcome == "ok":
            # The rows that land record their attempt when marked (Store.mark_sent: one write
            # instead of two); the ones the plane rejected, or stand-ins, record it here.
            others = [
                e.key for e in entries if e.stand_in_for is not None or e.ref in answer.rejections
            ]
            if others:
                store.record_attempt(others, None)
            self.conn.note_available()
        else:
            store.record_attempt([e.key for e in entries], answer.reason)
            if answer.outcome == "buffered":
                self.conn.note_unavailable(answer, len(entries))
            else:
                self.conn.note_available()
        return answer

    def post(self, entries: list[_Entry]) -> IngestAnswer:
        """POST and wait (bisection and stand-ins, which must know an answer before going on)."""
        return self.finish(entries, self.start(entries))

    def accept(self, entries: list[_Entry], answer: IngestAnswer, out: _Outcome) -> None:
        for e in entries:
            rejected = answer.rejections.get(e.ref)
            if e.stand_in_for is not None:
                out.quarantined[e.key] = e.stand_in_for
                if rejected is not None:
                    logger.warning(
                        "the plane also refused the state-stripped run end of thread %r: %s",
                        e.row.thread_id[:80],
                        rejected,
                    )
            elif rejected is None:
                out.synced.append(e.key)
            else:
                self.quarantine(e, rejected, out)

    def quarantine(self, entry: _Entry, reason: str, out: _Outcome) -> None:
        if entry.stand_in_for is not None:
            out.quarantined[entry.key] = entry.stand_in_for
        elif entry.row.step_type == STEP_RUN_END:
            out.refused_ends.append((entry, reason))
        else:
            out.quarantined[entry.key] = reason

    # ------------------------------------------------------------------ bisection

    def isolate(self, entries: list[_Entry], refusal: IngestAnswer, out: _Outcome) -> bool:
        """Quarantine each offender of a refused batch and send the rest; ``False`` if the plane
        stopped answering.

        One offender at a time: :meth:`split` finds the first one with one request per halving,
        and what it could not rule out waits; that goes in one request, which lands when no
        offender is left, and is split the same way when it is refused. Each offender costs
        at most ⌈log2 n⌉ + 2 requests (its halvings, a row tried alone, the remainder), so k
        offenders in a batch of n take at most k·(⌈log2 n⌉ + 2) + 1 requests, and k + 1 when
        the plane names them.
        """
        group, answer = entries, refusal
        while True:
            deferred: list[_Entry] = []
            if not self.split(group, answer, out, deferred):
                self.report.buffered += len(deferred)
                return False
            if not deferred:
                return True
            answer = self.post(deferred)
            if answer.outcome == "ok":
                self.accept(deferred, answer, out)
                return True
            if answer.outcome != "refused":
                self.report.buffered += len(deferred)
                return False
            group = deferred

    def split(
        self,
        group: list[_Entry],
        answer: IngestAnswer | None,
        out: _Outcome,
        deferred: list[_Entry],
    ) -> bool:
        """Find an offender in ``group``, which the plane refused with ``answer``, or which must
        hold one (``answer`` is ``None``: its left half landed); rows it cannot rule out go to
        the front of ``deferred``, oldest first. ``False`` if the plane stopped answering.

        Rows the refusal names are the plane's own verdict, quarantined with its reason at
        once. Otherwise only the left half is posted: if it lands, the offender is in the right
        half, which is split without being posted whole; if it is refused, the right half
        waits. A row is quarantined only when the plane named it or refused it alone, never by
        inference: after a 413 for a body's total size, the last "suspect" lands on its own.
        """
        if answer is not None:
            named = [e for e in group if e.ref in answer.named]
            if named:
                for e in named:
                    self.quarantine(e, answer.reason, out)
                deferred[:0] = [e for e in group if e.ref not in answer.named]
                return True
        if len(group) == 1:
            if answer is None:
                answer = self.post(group)
                if answer.outcome == "ok":
                    self.accept(group, answer, out)
                    return True
                if answer.outcome != "refused":
                    self.report.buffered += 1
                    return False
            self.quarantine(group[0], answer.reason, out)
            return True
        middle = len(group) // 2
        left, right = group[:middle], group[middle:]
        first = self.post(left)
        if first.outcome == "ok":
            self.accept(left, first, out)
            return self.split(right, None, out, deferred)
        if first.outcome == "refused":
            deferred[:0] = right
            return self.split(left, first, out, deferred)
        self.report.buffered += len(group)
        return False

    # ------------------------------------------------------------------ batches

    def fetch(self, flight: list[_Batch]) -> _Batch | None:
        """The next batch of the connection's oldest unsynced rows, mapped to the wire, past
        the rows of the batches in flight and without any row of a thread they carry (a
        thread's rows reach the plane in write order); ``None`` when there is nothing (new) to
        send, an empty batch when every row fetched waits for a thread in flight."""
        conn = self.conn
        rows = conn.store.fetch_unsynced_encoded(
            limit=conn.batch_rows,
            max_bytes=conn.batch_bytes,
            project_id=conn.project_id,
            exclude=set().union(*(b.keys for b in flight)),
        )
        if not rows:
            return None
        busy = set().union(*(b.threads for b in flight))
        if busy:
            rows = [r for r in rows if r.thread_id not in busy]
            if not rows:
                return _Batch(set(), [], _Outcome())
        batch = self.prepare(rows)
        if batch.keys <= self.seen:
            logger.error(
                "the store %r did not record the outcome of %d rows; stopping this pass",
                conn.store,
                len(batch.keys),
            )
            return None
        self.seen |= batch.keys
        return batch

    def prepare(self, rows: list[EncodedCheckpoint]) -> _Batch:
        """Map rows to wire entries; rows over an announced cap, or unmappable, are decided here.

        The batch ends before the row that would take its body past the plane's request limit
        (that row leads the next batch), so a batch is split before the plane must refuse it.
        """
        conn = self.conn
        agent_ids = conn.agent_ids()
        budget = conn.limits.body_bytes - len(_BODY_OPEN) - len(_BODY_CLOSE)
        used = 0
        out = _Outcome()
        entries: list[_Entry] = []
        keys: set[RowKey] = set()
        for row in rows:
            key: RowKey = (row.thread_id, row.seq or 0)
            try:
                wire = to_wire(row, agent_ids=agent_ids, encoder=conn.encoder, own_ids=conn.own_ids)
            except Exception as exc:  # a row nothing can send must not stall the others
                keys.add(key)
                out.quarantined[key] = _cut(
                    f"not sent: the stored row cannot be mapped to the wire ({type(exc).__name__}: {exc})"
                )
                continue
            cap = conn.limits.violation(wire)
            if cap is None and len(wire.body) > budget:
                cap = (
                    f"the item is {len(wire.body)} bytes, over the plane's "
                    f"{conn.limits.body_bytes}-byte request limit"
                )
            entry = _Entry(key, row, wire)
            if cap is not None and row.step_type == STEP_RUN_END:
                entry, cap = self.stand_in(entry, _cut(f"not sent: {cap}")), None
            size = len(entry.wire.body) + 1
            if entries and used + size > budget:
                break  # this row leads the next batch
            keys.add(key)
            if cap is None:
                entries.append(entry)
                used += size
            else:
                out.quarantined[key] = _cut(f"not sent: {cap}")
        return _Batch(keys, entries, out)

    def settle(self, batch: _Batch, answer: IngestAnswer | None) -> bool:
        """Decide every row of a sent batch from its answer (bisecting a refusal, sending
        stand-ins); ``False`` when the plane could not take it (stop the pass). Marks nothing:
        :meth:`apply` does, so that can overlap the next POST."""
        out = batch.out
        complete = True
        if answer is not None:
            if answer.outcome == "ok":
                self.accept(batch.entries, answer, out)
            elif answer.outcome == "refused":
                complete = self.isolate(batch.entries, answer, out)
            else:
                self.report.buffered += len(batch.entries)
                complete = False
        if out.refused_ends:
            complete = self.send_stand_ins(out) and complete
        return complete

    def run(self) -> None:
        """Send batches until none are left or the plane stops taking them.

        Up to ``conn.in_flight`` POSTs are out at once (decision 0155), and the next batch is
        fetched and mapped meanwhile. Batches in flight never share a thread, so each thread's
        rows still reach the plane in write order. Answers are settled oldest batch first; a
        row is marked synced only after the 2xx that carried it, so a crash in between at
        worst sends it again, which the plane's idempotent ingest absorbs. After an answer
        that stops the pass, the batches already out are still settled, and nothing more is
        sent (:meth:`wind_down`).
        """
        if not self.identified():
            return
        flight: deque[tuple[_Batch, Future[IngestAnswer] | None]] = deque()
        ready: _Batch | None = None
        more = complete = True
        while True:
            if complete and more and ready is None:
                ready = self.fetch([b for b, _ in flight])
                more = ready is not None
            if ready is not None and not ready.keys and flight:
                ready = None  # its rows wait for a thread in flight: fetch again after it
            if complete and ready is not None and len(flight) < self.conn.in_flight:
                sent = self.start(ready.entries) if ready.entries else None
                flight.append((ready, sent))
                ready = None
                continue
            if not flight:
                return
            batch, sent = flight.popleft()
            answer = self.finish(batch.entries, sent) if sent is not None else None
            if complete:
                complete = self.settle(batch, answer)
            else:
                self.wind_down(batch, answer)
            self.apply(batch.out)
            # Look again once a batch is marked: a write during its POST is sent by this pass.
            more = True

    def wind_down(self, batch: _Batch, answer: IngestAnswer | None) -> None:
        """Settle a batch that was already out when an answer stopped the pass, sending
        nothing more: a 2xx marks its rows (run ends it refused wait for the next pass and
        their stand-ins); any other answer leaves them buffered, a refusal unisolated."""
        if answer is not None and answer.outcome == "ok":
            self.accept(batch.entries, answer, batch.out)
            batch.out.refused_ends = []
        elif answer is not None:
            self.report.buffered += len(batch.entries)

    def identified(self) -> bool:
        """Learn the plane's identity first (how it keys rows decides the ids sent); when it
        cannot be had, the next batch's rows record the attempt and stay buffered."""
        conn = self.conn
        answer = conn.identify()
        if answer is None:
            return True
        rows = conn.store.fetch_unsynced_encoded(
            limit=conn.batch_rows, max_bytes=conn.batch_bytes, project_id=conn.project_id
        )
        self.report.requests += 1
        if rows:
            conn.store.record_attempt([(r.thread_id, r.seq or 0) for r in rows], answer.reason)
            self.report.buffered += len(rows)
            conn.note_unavailable(answer, len(rows))
        return False

    def stand_in(self, entry: _Entry, reason: str) -> _Entry:
        conn = self.conn
        wire = to_wire(
            entry.row,
            agent_ids=conn.agent_ids(),
            encoder=conn.encoder,
            stripped=reason,
            own_ids=conn.own_ids,
        )
        return _Entry(entry.key, entry.row, wire, stand_in_for=reason)

    def send_stand_ins(self, out: _Outcome) -> bool:
        """Send a state-stripped run end for each refused one; quarantine the originals once it lands."""
        stand_ins = [self.stand_in(entry, reason) for entry, reason in out.refused_ends]
        out.refused_ends = []
        answer = self.post(stand_ins)
        if answer.outcome == "buffered":
            # The originals stay pending: the next pass is refused again and tries again.
            self.report.buffered += len(stand_ins)
            return False
        if answer.outcome == "refused":
            logger.warning(
                "the plane refused %d state-stripped run end(s) too: %s",
                len(stand_ins),
                answer.reason,
            )
        for e in stand_ins:
            out.quarantined[e.key] = e.stand_in_for or ""
        return True

    def apply(self, out: _Outcome) -> None:
        store = self.conn.store
        if out.synced:
            store.mark_sent(out.synced)
            self.report.synced += len(out.synced)
        self.conn.beat(acked=bool(out.synced))
        if out.quarantined:
            store.mark_quarantined(out.quarantined)
            self.report.quarantined += len(out.quarantined)
            for (thread_id, seq), reason in out.quarantined.items():
                logger.warning(
                    "quarantined checkpoint seq %s of thread %r: %s (the plane's copy of the run "
                    "is incomplete; `durability outbox release` re-queues it)",
                    seq,
                    thread_id[:80],
                    reason,
                )


def drain_once(conn: Connection) -> DrainReport:
    """Send the connection's unsynced rows until none are left or the plane stops taking them.

    Safe to call from any thread; passes over one connection never overlap (a second caller
    waits for the first). Never raises for anything the plane or the HTTP client does (those
    leave rows buffered); a store that cannot be read raises its own
    :class:`~durability.errors.StoreError`.
    """
    with conn.draining() as active:
        if not active:
            return DrainReport()
        conn.beat()
        # Erasures first: a queued erase request of a thread goes before any later rows.
        erasures = send_erase_requests(conn.store, conn.client, conn.project_id)
        with ThreadPoolExecutor(conn.in_flight, thread_name_prefix="durability-post") as sender:
            one = _Pass(conn, sender)
            one.run()
        report = one.report
    report.erased = erasures.erased
    report.buffered += erasures.queued  # a waiting erase request backs the drain off too
    if report.buffered:
        report.last_error = conn.last_error or erasures.last_error
        report.retry_after = conn.retry_after
    return report


def _cut(reason: str) -> str:
    return reason[:REASON_MAX]


__all__ = ["DrainReport", "PlaneLimits", "drain_once", "supports_outbox"]
