"""Encryption coverage you can show an auditor: which rows are sealed, under which key.

Read from the envelopes' clear headers (no key needed, nothing opened), thread by thread:

* :func:`key_rows`: every checkpoint row's ids, ``seq``, key id (``None``: in clear) and size;
* :func:`coverage`: rows and bytes per key id, each with its status against the store's
  keyring:

  ==========  ==============================================================================
  status      meaning
  ==========  ==============================================================================
  current     sealed under the keyring's current key
  older       sealed under a key the keyring lists but no longer uses for writes (retired:
              ``durability store reencrypt`` moves these)
  missing     sealed under a key the keyring does not hold (or the store has no keyring)
  clear       not sealed (in a store that should be encrypted: migrate with reencrypt)
  ==========  ==============================================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from durability._util import redact_url
from durability.crypto.format import key_id_of
from durability.stores.base import Store
from durability.stores.rows import EncodedCheckpoint, Select, utf8_len

#: The statuses of :class:`KeyCoverage`, in the order views list them.
STATUSES = ("current", "older", "missing", "clear")


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One checkpoint row as coverage sees it."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    seq: int | None
    key_id: str | None
    state_bytes: int


@dataclass(frozen=True, slots=True)
class KeyCoverage:
    """Rows and bytes of state under one key id (``None``: in clear)."""

    key_id: str | None
    status: str
    rows: int
    bytes: int


@dataclass(frozen=True, slots=True)
class EncryptionCoverage:
    """A store's encryption coverage (``to_json`` for the CLI; key ids and counts only)."""

    url: str
    encrypting: bool
    current_key: str | None
    by_key: list[KeyCoverage]
    #: How many rows a sampled coverage read (its counts scaled to the store); ``None``: all.
    sampled: int | None = None

    @property
    def rows(self) -> int:
        """Every checkpoint row."""
        return sum(k.rows for k in self.by_key)

    @property
    def encrypted_rows(self) -> int:
        """Rows whose state is sealed."""
        return sum(k.rows for k in self.by_key if k.key_id is not None)

    @property
    def clear_rows(self) -> int:
        """Rows whose state is in clear."""
        return self.rows - self.encrypted_rows

    @property
    def retired_rows(self) -> int:
        """Rows sealed under a key that is not the current one (listed or not)."""
        return sum(k.rows for k in self.by_key if k.status in ("older", "missing"))

    @property
    def percent_encrypted(self) -> float:
        """Share of rows sealed, in percent (100 for an empty store)."""
        return 100.0 if self.rows == 0 else 100.0 * self.encrypted_rows / self.rows

    def to_json(self) -> dict[str, Any]:
        """The coverage as JSON-ready data."""
        return {
            "url": self.url,
            "encrypting": self.encrypting,
            "current_key": self.current_key,
            "rows": self.rows,
            "encrypted_rows": self.encrypted_rows,
            "clear_rows": self.clear_rows,
            "retired_rows": self.retired_rows,
            "percent_encrypted": round(self.percent_encrypted, 2),
            "sampled": self.sampled,
            "by_key": [
                {"key_id": k.key_id, "status": k.status, "rows": k.rows, "bytes": k.bytes}
                for k in self.by_key
            ],
        }


def key_rows(
    store: Store, thread_id: str | None = None, select: Select | None = None
) -> Iterator[KeyRow]:
    """Every checkpoint row (of one thread, or all; ``select``: those of one thread it picks)
    with its key id; nothing is opened."""
    threads = [thread_id] if thread_id is not None else (r.thread_id for r in store.iter_threads())
    for name in threads:
        for row in store._select(select or Select(name, None)):
            if isinstance(row, EncodedCheckpoint):
                text = row.state
                yield KeyRow(
                    row.thread_id,
                    row.namespace,
                    row.checkpoint_id,
                    row.seq,
                    key_id_of(text),
                    utf8_len(text),
                )


def status_of(store: Store, key_id: str | None) -> str:
    """A key id's status against the store's keyring (see the module's table)."""
    if key_id is None:
        return "clear"
    keyring = store.keyring
    if keyring is None or keyring.key(key_id) is None:
        return "missing"
    return "current" if key_id == keyring.current else "older"


def coverage(store: Store, *, sample: int | None = None, seed: int = 0) -> EncryptionCoverage:
    """Rows and bytes per key id, with each key's status; reads headers only.

    ``sample=N``: instead of every row, the envelopes of about ``N`` checkpoints picked at
    random (:meth:`~durability.stores.aggregates.Aggregates.sample_checkpoints`, ``seed``
    fixing the pick), each count scaled by the store's checkpoints over those read: an
    estimate, whose ``sampled`` says how many rows were read (``None``: every row, as for a
    store holding no more than ``N``).
    """
    population = None if sample is None else store.scans.totals()[0]
    if population is not None and population <= (sample or 0):
        sample = None  # a store no larger than the sample is read whole: exact, and as cheap
    counts: dict[str | None, list[int]] = {}
    rows = key_rows(store) if sample is None else _sampled_rows(store, sample, seed)
    read = 0
    for row in rows:
        read += 1
        entry = counts.setdefault(row.key_id, [0, 0])
        entry[0] += 1
        entry[1] += row.state_bytes
    if sample is not None and read and population:
        scale = population / read
        counts = {k: [round(n * scale), round(b * scale)] for k, (n, b) in counts.items()}
    by_key = [KeyCoverage(k, status_of(store, k), n, b) for k, (n, b) in counts.items()]
    by_key.sort(key=lambda k: (STATUSES.index(k.status), k.key_id or ""))
    return EncryptionCoverage(
        url=redact_url(store.url),
        encrypting=store.keyring is not None,
        current_key=None if store.keyring is None else store.keyring.current,
        by_key=by_key,
        sampled=None if sample is None else read,
    )


def _sampled_rows(store: Store, sample: int, seed: int) -> Iterator[KeyRow]:
    for thread_id, namespace, checkpoint_id in sorted(store.scans.sample_checkpoints(sample, seed)):
        yield from key_rows(store, thread_id, Select(thread_id, namespace, checkpoint_id))


__all__ = [
    "STATUSES",
    "EncryptionCoverage",
    "KeyCoverage",
    "KeyRow",
    "coverage",
    "key_rows",
    "status_of",
]
