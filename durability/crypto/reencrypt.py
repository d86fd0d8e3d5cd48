"""Re-encryption as validate → plan → apply: move every state under the keyring's current key.

:func:`plan_reencrypt` reads every checkpoint row (no payload opened) and counts rows and bytes
per key id (``None``: held in clear), which rows must change, and which would cross the plane's
``state_snapshot`` cap once sealed. :func:`apply_reencrypt` re-seals those rows under the
current key (a sealed row's plaintext is re-encrypted as it is; a clear row is compressed and
sealed) in batches of one transaction each.

Safe to kill at any moment: a row is replaced in one step, from its old envelope to its new
one (and only if it still holds the old one), so every row stays readable by the old key or the
new one, never neither; running the plan again finds what is left, so a killed run resumes.

What it does not move: pending writes (short-lived; sealed under the key current when they were
written) and the plane's copies (the plane's ingest is insert-only, so its rows keep the key they
were sent under): keep a key listed while such copies may still be restored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durability._util import chunks, redact_url
from durability.crypto.coverage import key_rows
from durability.crypto.format import key_id_of
from durability.errors import ConfigError, KeyMissing
from durability.stores.base import Store
from durability.stores.rows import EncodedCheckpoint, Select, utf8_len
from durability.stores.sealing import Reseal

#: The plane's default ``state_snapshot`` cap (bytes).
PLANE_STATE_CAP = 1_048_576
#: What sealing adds to a clear text at most, beyond base64's third (the envelope's members).
_ENVELOPE_OVERHEAD = 200

#: Called after each batch with (rows done, rows planned).
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class KeyRows:
    """How many rows (and bytes of state) are under one key id (``None``: in clear)."""

    key_id: str | None
    rows: int
    bytes: int
    current: bool
    known: bool


@dataclass(frozen=True, slots=True)
class ReencryptPlan:
    """What :func:`apply_reencrypt` would change; pure data (``to_json`` for the CLI)."""

    url: str
    current_key: str
    by_key: list[KeyRows]
    rows: int
    bytes: int
    threads: list[str] = field(repr=False)
    over_cap: list[tuple[str, str, str]]
    cap_bytes: int

    @property
    def empty(self) -> bool:
        """Whether every row is already under the current key."""
        return self.rows == 0

    @property
    def missing_keys(self) -> list[str]:
        """Key ids rows are sealed under that the keyring does not hold."""
        return [k.key_id for k in self.by_key if k.key_id is not None and not k.known]

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-ready data (key ids and counts only)."""
        return {
            "url": self.url,
            "current_key": self.current_key,
            "by_key": [
                {
                    "key_id": k.key_id,
                    "rows": k.rows,
                    "bytes": k.bytes,
                    "current": k.current,
                    "known": k.known,
                }
                for k in self.by_key
            ],
            "rows_to_change": self.rows,
            "bytes_to_change": self.bytes,
            "threads_to_change": len(self.threads),
            "cap_bytes": self.cap_bytes,
            "over_cap": [list(a) for a in self.over_cap],
            "missing_keys": self.missing_keys,
        }


@dataclass(frozen=True, slots=True)
class ReencryptReport:
    """What :func:`apply_reencrypt` changed."""

    rows: int
    bytes: int
    seconds: float

    @property
    def rows_per_second(self) -> float:
        """Throughput of the apply."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def plan_reencrypt(store: Store, *, cap_bytes: int = PLANE_STATE_CAP) -> ReencryptPlan:
    """Count every checkpoint row by key id, and what must change; writes nothing.

    Raises:
        ConfigError: the store was opened without a keyring (there is no current key).
    """
    sealer = store.sealer
    if sealer is None:
        raise ConfigError(
            f"cannot plan a re-encryption of {redact_url(store.url)}: it was opened without a "
            "keyring; put the new key first in DURABILITY_ENCRYPTION_KEYS (older keys after it)"
        )
    current = sealer.keyring.current
    counts: dict[str | None, list[int]] = {}
    threads: dict[str, None] = {}
    over: list[tuple[str, str, str]] = []
    for row in key_rows(store):
        entry = counts.setdefault(row.key_id, [0, 0])
        entry[0], entry[1] = entry[0] + 1, entry[1] + row.state_bytes
        if row.key_id != current:
            threads[row.thread_id] = None
            size = row.state_bytes
            sealed = size if row.key_id is not None else size * 4 // 3 + _ENVELOPE_OVERHEAD
            if sealed > cap_bytes:
                over.append((row.thread_id, row.namespace, row.checkpoint_id))
    by_key = [
        KeyRows(k, n, b, k == current, k is None or sealer.keyring.key(k) is not None)
        for k, (n, b) in sorted(counts.items(), key=lambda kv: (kv[0] != current, kv[0] or ""))
    ]
    todo = [k for k in by_key if not k.current]
    return ReencryptPlan(
        url=redact_url(store.url),
        current_key=current,
        by_key=by_key,
        rows=sum(k.rows for k in todo),
        bytes=sum(k.bytes for k in todo),
        threads=list(threads),
        over_cap=over,
        cap_bytes=cap_bytes,
    )


def apply_reencrypt(
    store: Store, plan: ReencryptPlan, *, batch: int = 1000, progress: Progress | None = None
) -> ReencryptReport:
    """Re-seal the plan's rows under the current key, ``batch`` rows per transaction.

    Raises:
        KeyMissing: rows are sealed under keys the keyring lacks (nothing is changed).
    """
    sealer = store.sealer
    if sealer is None or sealer.keyring.current != plan.current_key:
        raise ConfigError(
            f"cannot apply the re-encryption plan to {redact_url(store.url)}: the store's "
            f"current key is not the plan's ({plan.current_key!r}); plan again"
        )
    if plan.missing_keys:
        raise KeyMissing(
            f"cannot re-encrypt {plan.url}: rows are sealed under {plan.missing_keys}, which "
            "the keyring does not hold, so they cannot be opened; list those keys after the "
            "current one and plan again"
        )
    started, done, moved = time.perf_counter(), 0, 0
    pending: list[Reseal] = []
    for thread_id in plan.threads:
        for row in store._select(Select(thread_id, None)):
            if not isinstance(row, EncodedCheckpoint) or key_id_of(row.state) == plan.current_key:
                continue
            ids = (row.thread_id, row.namespace, row.checkpoint_id, "state")
            text = row.state
            new = sealer.reseal(text, *ids) if key_id_of(text) else sealer.seal(text, *ids)
            pending.append(Reseal(*ids[:3], text, new))
        if len(pending) >= batch:
            done, moved = _flush(store, pending, batch, done, moved, plan.rows, progress)
            pending = []
    done, moved = _flush(store, pending, batch, done, moved, plan.rows, progress)
    return ReencryptReport(done, moved, time.perf_counter() - started)


def _flush(
    store: Store,
    pending: list[Reseal],
    batch: int,
    done: int,
    moved: int,
    planned: int,
    progress: Progress | None,
) -> tuple[int, int]:
    for part in chunks(pending, batch):
        store._reseal(part)
        done += len(part)
        moved += sum(utf8_len(c.old) for c in part)
        if progress is not None:
            progress(done, planned)
    return done, moved


__all__ = [
    "PLANE_STATE_CAP",
    "KeyRows",
    "ReencryptPlan",
    "ReencryptReport",
    "apply_reencrypt",
    "plan_reencrypt",
]
