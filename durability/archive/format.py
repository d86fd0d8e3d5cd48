"""The archive format, version 1: gzip JSON Lines, one file per sweep, one gzip member per batch.

A sweep with ``archive=DIR`` writes ``DIR/sweep-<UTC time>-<pid>.jsonl.gz``. Each batch of
threads it is about to delete is written as one complete gzip member and flushed to disk
(``fsync``) before the batch is deleted, so a sweep killed at any moment leaves a readable
archive holding at least everything it deleted (a member cut short was never deleted; the
reader stops there). Lines are JSON objects with a ``kind``:

* ``header`` (first line of each member): ``format`` (``durability-archive``), ``version``,
  ``source`` (the store's URL, password removed), ``provider``, ``written_at``;
* ``thread``: one thread's ledger record (``owner``, ``run_id``, ``started_at``,
  ``declared_waiting`` / ``declared_finished`` in seconds, ``finished_at``, ``due_at``);
* ``checkpoint``: a stored checkpoint: its scalar fields and its payloads as the codec keeps
  them (``state``, ``node_input``, ``node_output``, ``iteration_counters``,
  ``interrupt_context``, ``metadata`` are codec texts), ``created_at`` in ISO 8601;
* ``write``: a pending write, its ``value`` a codec text.

Times are ISO 8601 with an offset. Readers refuse a ``version`` they do not know.

Beside each archive file, ``<file>.index`` lists its members as they are written (after each
member's ``fsync``): where each is and what it holds per thread, so opening an archive reads the
index, not every batch. The index is a cache: members it does not list (an older archive, a
sweep killed between a batch and its index line) are read from the archive itself.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from durability._util import redact_url
from durability.clock import parse_aware
from durability.errors import CheckpointStoreFormatError, ConfigError
from durability.model import ThreadRecord
from durability.stores.rows import EncodedCheckpoint, EncodedWrite

ARCHIVE_FORMAT = "durability-archive"
ARCHIVE_VERSION = 1
SUFFIX = ".jsonl.gz"
INDEX_FORMAT = "durability-archive-index"
INDEX_SUFFIX = ".index"

_CHECKPOINT_FIELDS = [f.name for f in fields(EncodedCheckpoint) if f.name != "seq"]
_WRITE_FIELDS = [f.name for f in fields(EncodedWrite)]
_LEDGER_TIMES = ("started_at", "finished_at", "due_at")
#: Compressed bytes read at a time while scanning an archive file.
_BLOCK = 1 << 20


class ArchiveWriter:
    """Appends batches to one archive file; each :meth:`write_batch` is durable when it returns."""

    def __init__(self, directory: str | Path, *, source: str, provider: str, now: datetime) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = now.strftime("%Y%m%dT%H%M%S.%fZ")
        self.path = self.directory / f"sweep-{stamp}-{os.getpid()}{SUFFIX}"
        self._header = {
            "kind": "header",
            "format": ARCHIVE_FORMAT,
            "version": ARCHIVE_VERSION,
            "source": redact_url(source),
            "provider": provider,
        }
        self._file = self.path.open("ab")
        self._index = index_path(self.path).open("ab")
        self._index.write(_line({"kind": "header", "format": INDEX_FORMAT, "version": 1}))
        self._offset = 0
        self.checkpoints = 0
        self.writes = 0

    def write_batch(
        self,
        records: Sequence[ThreadRecord],
        checkpoints: Sequence[EncodedCheckpoint],
        writes: Sequence[EncodedWrite],
        now: datetime,
    ) -> None:
        """Write one gzip member holding these threads' records, checkpoints and writes, and
        flush it to disk."""
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as out:
            out.write(_line({**self._header, "written_at": now.isoformat()}))
            for record in records:
                out.write(_line(_thread_line(record)))
            for cp in checkpoints:
                out.write(_line(_checkpoint_line(cp)))
            for w in writes:
                out.write(_line({"kind": "write", **asdict(w)}))
        member = buffer.getvalue()
        self._file.write(member)
        self._file.flush()
        os.fsync(self._file.fileno())
        # Listed once the member is on disk: the index never names a batch the file lacks.
        threads = summarize([*records, *checkpoints, *writes])
        self._index.write(_line(_index_line(self._offset, len(member), threads)))
        self._index.flush()
        self._offset += len(member)
        self.checkpoints += len(checkpoints)
        self.writes += len(writes)

    def close(self) -> None:
        self._file.close()
        self._index.close()
        if self.path.stat().st_size == 0:
            self.path.unlink()
            index_path(self.path).unlink()


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _thread_line(r: ThreadRecord) -> dict[str, Any]:
    return {
        "kind": "thread",
        "thread_id": r.thread_id,
        "owner": r.owner,
        "run_id": r.run_id,
        **{name: _iso(getattr(r, name)) for name in _LEDGER_TIMES},
        "declared_waiting": _seconds(r.declared_waiting),
        "declared_finished": _seconds(r.declared_finished),
    }


def _checkpoint_line(cp: EncodedCheckpoint) -> dict[str, Any]:
    data = {name: getattr(cp, name) for name in _CHECKPOINT_FIELDS}
    data["created_at"] = cp.created_at.isoformat()
    return {"kind": "checkpoint", **data}


def _index_line(offset: int, length: int, threads: dict[str, ThreadSummary]) -> dict[str, Any]:
    return {
        "kind": "member",
        "offset": offset,
        "length": length,
        "threads": {
            t: [s.checkpoints, s.size_bytes, _iso(s.newest_at), s.last] for t, s in threads.items()
        },
        "ledger": [_thread_line(s.ledger) for s in threads.values() if s.ledger is not None],
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


# ---------------------------------------------------------------------------- reading


def archive_files(directory: Path) -> list[Path]:
    """The archive files of a directory, oldest first (their names sort by time)."""
    if not directory.is_dir():
        raise ConfigError(
            f"cannot open the archive {str(directory)!r}: it is not a directory; give the "
            "directory a sweep archived to (sweep --archive DIR)"
        )
    return sorted(directory.glob(f"*{SUFFIX}"))


@dataclass(frozen=True, slots=True)
class Member:
    """One complete gzip member of an archive file: where it is, and the ``seq`` its first
    checkpoint gets (checkpoints are numbered in the order read, across the directory)."""

    path: Path
    offset: int
    length: int
    first_seq: int


@dataclass(slots=True)
class ThreadSummary:
    """What one member holds of one thread: what an archive's index keeps of it."""

    checkpoints: int = 0
    size_bytes: int = 0
    newest_at: datetime | None = None
    #: The thread's last checkpoint's place among the member's checkpoints (from 1; 0: none).
    last: int = 0
    ledger: ThreadRecord | None = None


def summarize(
    items: Iterable[ThreadRecord | EncodedCheckpoint | EncodedWrite],
) -> dict[str, ThreadSummary]:
    """Per thread, what one member's records hold (every thread with any record)."""
    found: dict[str, ThreadSummary] = {}
    place = 0
    for item in items:
        summary = found.setdefault(item.thread_id, ThreadSummary())
        if isinstance(item, EncodedCheckpoint):
            place += 1
            summary.checkpoints += 1
            summary.size_bytes += item.size_bytes
            summary.last = place
            if summary.newest_at is None or item.created_at > summary.newest_at:
                summary.newest_at = item.created_at
        elif isinstance(item, ThreadRecord):
            summary.ledger = item
    return found


def index_path(path: Path) -> Path:
    """The index file beside an archive file."""
    return path.with_name(path.name + INDEX_SUFFIX)


def read_index(path: Path) -> list[tuple[int, int, dict[str, ThreadSummary]]]:
    """The members of an archive file its index lists: offset, length and per-thread summary,
    as far as they run on from the file's start and lie within it. ``[]`` without an index or
    with one this version does not read; whatever it leaves out is read from the file."""
    try:
        lines = index_path(path).read_bytes().splitlines()
        size = path.stat().st_size
    except OSError:
        return []
    members: list[tuple[int, int, dict[str, ThreadSummary]]] = []
    end = 0
    try:
        header = json.loads(lines[0])
        if header.get("format") != INDEX_FORMAT or header.get("version") != 1:
            return []
        for raw in lines[1:]:
            data = json.loads(raw)
            offset, length = data["offset"], data["length"]
            if offset != end or not 0 < length <= size - offset:
                break
            members.append((offset, length, _summaries(data, path)))
            end = offset + length
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        IndexError,
        CheckpointStoreFormatError,
    ):
        pass  # a line cut short or damaged: the members after the last whole one are read
    return members


def _summaries(data: dict[str, Any], path: Path) -> dict[str, ThreadSummary]:
    found: dict[str, ThreadSummary] = {}
    for thread_id, (checkpoints, size_bytes, newest_at, last) in data["threads"].items():
        numbers = (checkpoints, size_bytes, last)
        if not all(type(n) is int and n >= 0 for n in numbers):
            raise TypeError(f"counts {numbers!r} are not counts")
        found[thread_id] = ThreadSummary(checkpoints, size_bytes, parse_aware(newest_at), last)
    for line in data["ledger"]:
        record = _parse(dict(line), path)
        if not isinstance(record, ThreadRecord):
            raise TypeError("the ledger holds a record that is not a thread's")
        found.setdefault(record.thread_id, ThreadSummary()).ledger = record
    return found


def read_archive(
    directory: str | Path,
) -> Iterator[ThreadRecord | EncodedCheckpoint | EncodedWrite]:
    """Every record of every archive file in ``directory``, in the order written, one member in
    memory at a time (a member cut short at the end of a file ends that file's reading)."""
    for path in archive_files(Path(directory)):
        for _offset, _length, data in scan_members(path):
            yield from parse_member(path, data)


def scan_members(path: Path, start: int = 0) -> Iterator[tuple[int, int, bytes]]:
    """The complete members of one archive file from byte ``start`` on, in order: offset,
    length, decompressed text.

    Only one member is held at a time. A member cut short (a sweep killed while writing it,
    before that batch was deleted) and anything after it is not read."""
    offset = start
    with path.open("rb") as raw:
        raw.seek(start)
        pending = b""
        while True:
            inflate = zlib.decompressobj(wbits=31)
            parts: list[bytes] = []
            consumed = 0
            while not inflate.eof:
                block = pending or raw.read(_BLOCK)
                pending = b""
                if not block:
                    return  # the end of the file, inside a member (or after the last one)
                try:
                    parts.append(inflate.decompress(block))
                except zlib.error:
                    return  # a damaged tail: never deleted, not read
                consumed += len(block) - len(inflate.unused_data)
            pending = inflate.unused_data
            yield offset, consumed, b"".join(parts)
            offset += consumed


def read_member(member: Member) -> bytes:
    """One member's decompressed text (its place came from :func:`scan_members`)."""
    with member.path.open("rb") as raw:
        raw.seek(member.offset)
        return zlib.decompress(raw.read(member.length), wbits=31)


def parse_member(
    path: Path, data: bytes
) -> Iterator[ThreadRecord | EncodedCheckpoint | EncodedWrite]:
    """The records of one member's text, the header checked."""
    for raw in data.splitlines():
        try:
            item = _parse(json.loads(raw), path)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # Not the record's text: it may hold a thread's state.
            raise CheckpointStoreFormatError(
                f"cannot read the archive {str(path)!r}: it holds a record durability never "
                f"writes ({type(exc).__name__}: {str(exc)[:120]}); it was damaged or is not a "
                "durability archive — move the file out of the directory (or restore it from "
                "a copy) and open the archive again"
            ) from None
        if item is not None:
            yield item


def _parse(
    data: dict[str, Any], path: Path
) -> ThreadRecord | EncodedCheckpoint | EncodedWrite | None:
    kind = data.pop("kind", None)
    if kind == "header":
        if data.get("format") != ARCHIVE_FORMAT or data.get("version") != ARCHIVE_VERSION:
            raise CheckpointStoreFormatError(
                f"cannot read the archive {str(path)!r}: it is {data.get('format')!r} version "
                f"{data.get('version')!r}, and this version reads {ARCHIVE_FORMAT!r} version "
                f"{ARCHIVE_VERSION}; read it with the durability version that wrote it"
            )
        return None
    if kind == "checkpoint":
        created = parse_aware(data["created_at"])
        return EncodedCheckpoint(**{**data, "created_at": created})
    if kind == "write":
        return EncodedWrite(**data)
    if kind == "thread":
        return ThreadRecord(
            thread_id=data["thread_id"],
            owner=data["owner"],
            run_id=data["run_id"],
            started_at=parse_aware(data["started_at"]),
            finished_at=parse_aware(data["finished_at"]),
            due_at=parse_aware(data["due_at"]),
            declared_waiting=_span(data["declared_waiting"]),
            declared_finished=_span(data["declared_finished"]),
        )
    return None  # a kind a later minor revision added: skipped


def _span(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)
