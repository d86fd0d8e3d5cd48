"""How the Redis store writes its values: checkpoint, write and park documents, ledger fields.

A checkpoint document is a JSON header line of the scalar fields, then the payload texts
(codec output, already JSON) unescaped; the header ends with their lengths. Everything needed
to send the checkpoint is in the document, and the analysis scripts read the header line
alone, so payloads never leave the server for a frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson

from durability.clock import from_micros, to_micros
from durability.errors import StoreError
from durability.model import Lease, OutboxEntry, Park, ThreadRecord
from durability.stores.outbox import PendingSpan
from durability.stores.parks import park_from_texts, park_texts
from durability.stores.rows import (
    ID_FIELDS,
    PAYLOAD_FIELDS,
    SCALAR_FIELDS,
    EncodedCheckpoint,
    EncodedWrite,
)

#: The header line's fields, in order (then the payload lengths).
HEADER_FIELDS = (*ID_FIELDS, *SCALAR_FIELDS, "size_bytes")
_CREATED = HEADER_FIELDS.index("created_at")


def doc(row: EncodedCheckpoint) -> bytes:
    """``row`` as a checkpoint document."""
    texts = [getattr(row, name) for name in PAYLOAD_FIELDS]
    head: list[Any] = [getattr(row, name) for name in HEADER_FIELDS]
    head[_CREATED] = to_micros(row.created_at)
    head.append([len(t) for t in texts])
    try:
        header = orjson.dumps(head)
    except orjson.JSONEncodeError as exc:
        raise StoreError(f"cannot put checkpoint {row.checkpoint_id[:80]!r}: {exc}") from exc
    return header + b"\n" + "".join(texts).encode("utf-8")


def undoc(data: bytes, seq: int) -> EncodedCheckpoint:
    """A checkpoint document back as the store's row."""
    cut = data.index(b"\n")
    head = orjson.loads(data[:cut])
    body = data[cut + 1 :].decode("utf-8")
    lengths = head.pop()
    texts, pos = [], 0
    for length in lengths:
        texts.append(body[pos : pos + length])
        pos += length
    values: dict[str, Any] = dict(zip(HEADER_FIELDS, head, strict=True))
    values.update(zip(PAYLOAD_FIELDS, texts, strict=True))
    values["created_at"] = from_micros(values["created_at"])
    return EncodedCheckpoint(**values, seq=seq)


def header(data: bytes) -> dict[str, Any]:
    """The scalar fields of a checkpoint document's header line, by name."""
    return dict(zip(HEADER_FIELDS, orjson.loads(data), strict=False))


def hit(found: Any) -> EncodedCheckpoint | None:
    """A ``[seq, document]`` script answer as a row (``None`` when there was none)."""
    if not found or found[1] is None:
        return None
    return undoc(found[1], int(found[0]))


def rows_of(flat: Sequence[Any], thread_id: str) -> list[EncodedCheckpoint]:
    """A flat ``seq, document, …`` script answer as rows of ``thread_id`` (a tag's other ids dropped)."""
    rows = [undoc(flat[j + 1], int(flat[j])) for j in range(0, len(flat), 2)]
    return [r for r in rows if r.thread_id == thread_id]


def row_args(row: EncodedCheckpoint, document: bytes) -> list[Any]:
    """A row's arguments to the put and park scripts: ids, document, size, time, outbox header."""
    created = to_micros(row.created_at)
    outbox_header = orjson.dumps(
        {
            "th": row.thread_id,
            "c": row.checkpoint_id,
            "ns": row.namespace,
            "p": row.project_id,
            "at": str(created),
            "b": row.size_bytes,
            "st": row.step_type,
        }
    )
    return [row.namespace, row.checkpoint_id, document, row.size_bytes, created, outbox_header]


def header_time(outbox_header: bytes) -> int:
    """The write time an outbox header records."""
    return int(orjson.loads(outbox_header)["t"])


def pending_span(header: bytes, until_at: bytes, since: bytes, released_at: int) -> bytes:
    """The history entry of a released row: its project, write time, the span it was pending
    (from ``since``, else its write, to ``until_at``, its quarantine), its size, the release."""
    head = orjson.loads(header)
    created = int(head["at"])
    start = int(since) if since else created
    return orjson.dumps(
        [head["p"], created, start, int(until_at) if until_at else created, head["b"], released_at]
    )


def span_of(raw: bytes) -> PendingSpan:
    """A history entry as a :class:`~durability.stores.outbox.PendingSpan`."""
    project, created, start, until_at, size, released = orjson.loads(raw)
    return PendingSpan(
        project_id=project,
        created_at=from_micros(created),
        pending_from=from_micros(start),
        pending_until=from_micros(until_at),
        size_bytes=size,
        released_at=from_micros(released),
    )


def pairs(flat: Sequence[bytes]) -> dict[str, bytes]:
    """An ``HGETALL`` answer as a dict."""
    return {flat[j].decode(): flat[j + 1] for j in range(0, len(flat), 2)}


def entries(fields: dict[str, bytes], *, synced: bool) -> list[tuple[int, OutboxEntry]]:
    """The outbox entries in one of a thread's outbox state hashes, with their write times."""
    found = []
    for name, raw in fields.items():
        if not name.startswith("h"):
            continue
        seq = name[1:]
        head = orjson.loads(raw)
        reason = fields.get("q" + seq)
        synced_at = fields.get("z" + seq)
        since = fields.get("r" + seq)
        error = fields.get("e" + seq)
        entry = OutboxEntry(
            thread_id=head["th"],
            checkpoint_id=head["c"],
            namespace=head["ns"],
            seq=int(seq),
            project_id=head["p"],
            created_at=from_micros(int(head["at"])),
            size_bytes=head["b"],
            synced=synced or reason is not None,
            sync_error=reason.decode() if reason is not None else None,
            attempts=int(fields.get("a" + seq, b"0")),
            last_error=error.decode() if error is not None else None,
            synced_at=from_micros(int(synced_at)) if synced_at is not None else None,
            step_type=head["st"],
            pending_since=from_micros(int(since)) if since is not None else None,
        )
        found.append((int(head["t"]), entry))
    return found


def write_doc(w: EncodedWrite) -> bytes:
    """A pending write's document: its fields, then its value text."""
    return (
        orjson.dumps([w.channel, w.task_path, w.task_id, w.idx]) + b"\n" + w.value.encode("utf-8")
    )


def unwrite(data: bytes, thread_id: str, namespace: str, checkpoint_id: str) -> EncodedWrite:
    """A pending write's document back as the store's row."""
    cut = data.index(b"\n")
    channel, task_path, task_id, idx = orjson.loads(data[:cut])
    return EncodedWrite(
        thread_id=thread_id,
        namespace=namespace,
        checkpoint_id=checkpoint_id,
        task_id=task_id,
        idx=idx,
        channel=channel,
        value=data[cut + 1 :].decode("utf-8"),
        task_path=task_path,
    )


def park_doc(park: Park) -> bytes:
    """A park's document."""
    return orjson.dumps(
        {
            **park_texts(park),
            "deadline": str(to_micros(park.deadline)),
            "created_at": None if park.created_at is None else str(to_micros(park.created_at)),
        }
    )


def unpark(data: bytes) -> Park:
    """A park's document back as a :class:`Park`."""
    fields = orjson.loads(data)
    created = fields["created_at"]
    return park_from_texts(
        fields,
        from_micros(int(fields["deadline"])),
        None if created is None else from_micros(int(created)),
    )


def lease(thread_id: str, raw: Sequence[bytes]) -> Lease:
    """A lease from its four ledger fields (holder, run, acquired, expires)."""
    holder, run_id, acquired, expires = (v.decode() for v in raw)
    return Lease(
        thread_id=thread_id,
        holder=holder,
        run_id=run_id,
        acquired_at=from_micros(int(acquired)) if acquired else None,
        expires_at=from_micros(int(expires)),
    )


def _time(value: bytes | None) -> datetime | None:
    return None if value is None else from_micros(int(value))


def _delta(value: bytes | None) -> timedelta | None:
    return None if value is None else timedelta(microseconds=int(value))


def record(fields: dict[str, bytes], checkpoints: int) -> ThreadRecord:
    """A thread record from the thread's meta hash and its checkpoint count."""
    thread_id = fields["id"].decode()
    held = None
    if "lh" in fields:
        raw = [fields["lh"], fields.get("lr", b""), fields.get("la", b""), fields["le"]]
        held = lease(thread_id, raw)
    last = fields.get("last")

    def text(name: str) -> str | None:
        value = fields.get(name)
        return None if value is None else value.decode()

    return ThreadRecord(
        thread_id=thread_id,
        owner=text("ow"),
        run_id=text("ri"),
        started_at=_time(fields.get("st")),
        declared_waiting=_delta(fields.get("dw")),
        declared_finished=_delta(fields.get("df")),
        finished_at=_time(fields.get("fa")),
        due_at=_time(fields.get("da")),
        lease=held,
        checkpoints=checkpoints,
        size_bytes=int(fields.get("size", b"0")),
        newest_at=_time(fields.get("na")),
        newest_seq=int(last) if last is not None else None,
    )
