"""The Redis store's outbox: each thread's ``od``/``os``/``sy`` hashes, and two cross-slot indexes.

``outbox`` (pending rows by write time) is what the drain reads, oldest first; ``quarantine``
lists refused rows. While the store replicates (a connection is recorded, open or closed) an
unsent row's document and state outlive its thread's expiry, until the plane has it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import astuple
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from durability._util import chunks
from durability.clock import from_micros, to_micros
from durability.model import OutboxEntry
from durability.stores.outbox import ConnectionRecord, EntryQuery, Outbox, PendingSpan, RowKey
from durability.stores.redis import documents as docs
from durability.stores.redis.keys import IndexOps, member, member_seq, member_tag, thread_tag
from durability.stores.rows import EncodedCheckpoint

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore


# The states whose rows a cross-slot index lists in write order, and that index's key.
_INDEXED = {"pending": "outbox", "quarantined": "quarantine"}


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def _matching(
    entries: Iterable[tuple[int, OutboxEntry]], query: EntryQuery
) -> list[tuple[int, OutboxEntry]]:
    """The entries ``query`` asks for, oldest first (then by thread id and seq)."""
    state, project_id, thread_id, after_seq, _limit = astuple(query)
    chosen = [
        (t, e)
        for t, e in entries
        if (state is None or e.state == state)
        and (project_id is None or e.project_id == project_id)
        and (thread_id is None or e.thread_id == thread_id)
        and (after_seq is None or e.seq > after_seq)
    ]
    chosen.sort(key=lambda pair: (pair[0], pair[1].thread_id, pair[1].seq))
    return chosen


class RedisOutbox(Outbox):
    """Pending, synced and quarantined rows of a Redis store, and its connection records."""

    store: RedisStore

    def _fetch(
        self, limit: int, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        rows: list[EncodedCheckpoint] = []
        stale = IndexOps()
        offset, window = 0, max(limit, 100)
        while len(rows) < limit:
            entries = self.store.run("read the outbox", self._window(offset, window))
            if not entries:
                break
            offset += len(entries)
            members = [m.decode() for m, _score in entries]
            for name, (found, quarantined) in zip(members, self._rows(members), strict=True):
                if found is None or quarantined:  # gone, or moved to quarantine: repair
                    stale.outbox[name] = 0
                    continue
                row = docs.undoc(found, member_seq(name))
                wanted = project_id is None or row.project_id == project_id
                if wanted and (row.thread_id, row.seq) not in exclude:
                    rows.append(row)
                    if len(rows) == limit:
                        break
            if len(entries) < window:
                break
        if not stale.empty:
            self.store.forget(stale, {member_tag(m) for m in stale.members()})
        return rows

    def _window(
        self, offset: int, size: int, key: str | None = None
    ) -> Callable[[bool], list[Any]]:
        """Members ``offset`` onwards of an index (the pending one unless ``key``), oldest first."""
        store = self.store

        def call(_retry: bool) -> list[Any]:
            index = store.keys.outbox if key is None else key
            return list(store.client.zrange(index, offset, offset + size - 1, withscores=True))

        return call

    def _rows(self, members: Sequence[str]) -> list[tuple[bytes | None, bool]]:
        """Each member's document (``None`` if gone) and whether it is quarantined."""
        groups: dict[str, list[str]] = {}
        for name in members:
            groups.setdefault(member_tag(name), []).append(str(member_seq(name)))
        raw = self.store.eval_many(
            "read the outbox", "outbox_read", list(groups.items()), write=False
        )
        found: dict[str, tuple[bytes | None, bool]] = {}
        for (tag, seqs), flat in zip(groups.items(), raw, strict=True):
            for j, seq in enumerate(seqs):
                document, header, reason = flat[5 * j], flat[5 * j + 1], flat[5 * j + 2]
                found[member(tag, int(seq))] = (
                    document if header is not None else None,
                    reason is not None,
                )
        return [found[m] for m in members]

    def _by_thread(self, keys: Iterable[RowKey]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for thread_id, seq in keys:
            groups.setdefault(thread_tag(thread_id), []).append(seq)
        return groups

    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        groups = self._by_thread(keys)
        if not groups:
            return
        calls = [(tag, [to_micros(now), *seqs]) for tag, seqs in groups.items()]
        moved = self.store.eval_many("mark rows synced", "outbox_synced", calls)
        remove = IndexOps()
        for (tag, _), seqs in zip(calls, moved, strict=True):
            for seq in seqs:
                remove.outbox[member(tag, int(seq))] = 0
                remove.quarantine[member(tag, int(seq))] = 0
        self.store.index("index synced rows", remove=remove)

    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        groups: dict[str, list[Any]] = {}
        for (thread_id, seq), reason in reasons.items():
            groups.setdefault(thread_tag(thread_id), []).extend([seq, reason])
        if not groups:
            return
        calls = [(tag, [to_micros(now), *pairs]) for tag, pairs in groups.items()]
        out = self.store.eval_many("quarantine rows", "outbox_quarantine", calls)
        add, remove = IndexOps(), IndexOps()
        for (tag, _), flat in zip(calls, out, strict=True):
            for j in range(0, len(flat), 2):
                name = member(tag, int(flat[j]))
                remove.outbox[name] = 0
                add.quarantine[name] = docs.header_time(flat[j + 1])
        self.store.index("index quarantined rows", add=add, remove=remove)

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        groups = self._by_thread(keys)
        if groups:
            calls = [
                (tag, ["0" if error is None else "1", error or "", *seqs])
                for tag, seqs in groups.items()
            ]
            self.store.eval_many("record a send attempt", "outbox_attempt", calls)

    def _release(self, keys: list[RowKey] | None, now: datetime) -> int:
        store = self.store
        if keys is None:
            members = store.run(
                "release quarantined rows",
                lambda _r: store.client.zrange(store.keys.quarantine, 0, -1),
            )
            groups: dict[str, list[int]] = {}
            for name in members:
                groups.setdefault(member_tag(name), []).append(member_seq(name.decode()))
        else:
            groups = self._by_thread(keys)
        if not groups:
            return 0
        at = to_micros(now)
        calls = [(tag, [at, *seqs]) for tag, seqs in groups.items()]
        out = store.eval_many("release quarantined rows", "outbox_release", calls)
        add, remove = IndexOps(), IndexOps()
        spans: list[bytes] = []
        for (tag, _), flat in zip(calls, out, strict=True):
            for j in range(0, len(flat), 4):
                name = member(tag, int(flat[j]))
                remove.quarantine[name] = 0
                add.outbox[name] = docs.header_time(flat[j + 1])
                spans.append(docs.pending_span(flat[j + 1], flat[j + 2], flat[j + 3], at))
        if spans:
            store.run(
                "keep the outbox history", lambda _r: store.client.rpush(store.keys.history, *spans)
            )
        store.index("index released rows", add=add, remove=remove)
        return len(add.outbox)

    def _history(self) -> list[PendingSpan]:
        store = self.store
        raw = store.run(
            "read the outbox history", lambda _r: store.client.lrange(store.keys.history, 0, -1)
        )
        return [docs.span_of(item) for item in raw]

    def _entries(self, query: EntryQuery) -> list[OutboxEntry]:
        if query.limit is not None and query.thread_id is None and query.state in _INDEXED:
            return self._oldest(query, query.limit)
        thread_id = query.thread_id
        tags = [thread_tag(thread_id)] if thread_id is not None else self._tags(query.state)
        chosen = _matching(self._listed(tags), query)
        result = [e for _, e in chosen]
        return result if query.limit is None else result[: query.limit]

    def _oldest(self, query: EntryQuery, limit: int) -> list[OutboxEntry]:
        """The ``limit`` oldest entries in a state, read window by window of its index in write
        order: the hashes of the threads in each window, not of every thread in the state."""
        key = getattr(self.store.keys, _INDEXED[query.state or ""])
        found: list[tuple[int, OutboxEntry]] = []
        offset, size = 0, max(limit, 100)
        while True:
            window = self.store.run("read the outbox", self._window(offset, size, key))
            offset += len(window)
            members = {m.decode() for m, _score in window}
            listed = self._listed(sorted({member_tag(m) for m in members}))
            found += [
                (t, e) for t, e in listed if member(thread_tag(e.thread_id), e.seq) in members
            ]
            chosen = _matching(found, query)
            # Every member after this window was written at or after its last score.
            if len(window) < size or (
                len(chosen) >= limit and window[-1][1] > chosen[limit - 1][0]
            ):
                return [e for _, e in chosen[:limit]]

    def _listed(self, tags: Sequence[str]) -> list[tuple[int, OutboxEntry]]:
        """Every outbox entry of these threads, with its write time."""
        entries: list[tuple[int, OutboxEntry]] = []
        if tags:
            raw = self.store.eval_many(
                "read the outbox", "outbox_list", [(t, []) for t in tags], write=False
            )
            for pending_fields, synced_fields, _name in raw:
                entries += docs.entries(docs.pairs(pending_fields), synced=False)
                entries += docs.entries(docs.pairs(synced_fields), synced=True)
        return entries

    def _tags(self, state: str | None) -> list[str]:
        """The tags of the threads that may hold entries in ``state``."""
        keys = self.store.keys
        sources = {"pending": [keys.outbox], "quarantined": [keys.quarantine]}.get(
            state or "", [keys.outbox, keys.quarantine, keys.threads]
        )

        def scan(_retry: bool) -> set[str]:
            found: set[str] = set()
            for key in sources:
                found |= {member_tag(m) for m, _ in self.store.client.zscan_iter(key, count=1000)}
            return found

        return sorted(self.store.run("read the outbox", scan))

    def _record_connection(self, connection: ConnectionRecord) -> None:
        record: dict[str, Any] = {
            "target": connection.target,
            "at": to_micros(connection.connected_at),
        }
        if connection.disconnected_at is not None:
            record["off"] = to_micros(connection.disconnected_at)
        value = orjson.dumps(record)
        store = self.store
        store.run(
            "record a connection",
            lambda _r: store.client.hset(store.keys.connections, connection.project_id, value),
        )
        store.refresh_replicating()
        if connection.open:
            # Rows written before the first connect carry their thread's expiry: from now on
            # they wait for the plane (and a writer still on the cached answer is corrected).
            self._apply_expiry()

    def _forget_connection(self, project_id: str) -> None:
        store = self.store
        store.run(
            "forget a connection", lambda _r: store.client.hdel(store.keys.connections, project_id)
        )
        store.run(
            "forget a connection", lambda _r: store.client.hdel(store.keys.drains, project_id)
        )
        store.refresh_replicating()
        if not store.store_replicates():
            self._apply_expiry()

    def _connections(self) -> list[ConnectionRecord]:
        store = self.store
        raw = store.run("read connections", lambda _r: store.client.hgetall(store.keys.connections))
        drains = store.run("read connections", lambda _r: store.client.hgetall(store.keys.drains))
        found = []
        for project, value in sorted(raw.items()):
            data = orjson.loads(value)
            beat = orjson.loads(drains.get(project, b"{}"))
            found.append(
                ConnectionRecord(
                    project.decode(),
                    data["target"],
                    from_micros(data["at"]),
                    _time(data.get("off")),
                    _time(beat.get("seen")),
                    _time(beat.get("ack")),
                )
            )
        return found

    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        store = self.store

        def beat(_retry: bool) -> None:
            current = orjson.loads(store.client.hget(store.keys.drains, project_id) or b"{}")
            current["seen"] = to_micros(seen_at)
            if acked_at is not None:
                current["ack"] = to_micros(acked_at)
            store.client.hset(store.keys.drains, project_id, orjson.dumps(current))

        store.run("record a drain heartbeat", beat)

    def _apply_expiry(self) -> None:
        """Give every unsent row's outbox keys the expiry replication calls for.

        Replicating: none, so a row outlives its thread until the plane has it. Not: its
        thread's, and the rows of a thread that already expired (kept only for the plane)
        are dropped with their index entries.
        """
        store = self.store
        members: dict[str, list[str]] = {}

        def scan(_retry: bool) -> None:
            for key in (store.keys.outbox, store.keys.quarantine):
                for name, _score in store.client.zscan_iter(key, count=1000):
                    members.setdefault(member_tag(name), []).append(name.decode())

        store.run("read the outbox", scan)
        for chunk in chunks(sorted(members)):
            dropped = store.eval_many(
                "set the outbox's expiry", "outbox_expiry", [(t, []) for t in chunk]
            )
            gone = [m for tag, d in zip(chunk, dropped, strict=True) if d for m in members[tag]]
            if gone:
                store.forget(
                    IndexOps(outbox=dict.fromkeys(gone, 0.0), quarantine=dict.fromkeys(gone, 0.0)),
                    {member_tag(m) for m in gone},
                )
