"""Where a store seals what it writes and opens what it reads: the one place encryption happens.

:class:`~durability.stores.base.Store` calls these on every checkpoint and pending write it
puts or returns. Sealed are the state and each pending write's value; every other field stays
clear, so frames, the sweep, the outbox and the plane need no key. The rules (fail-closed):

* a store with a keyring seals every state and write value under the current key;
* reading a sealed payload opens it, or fails naming the key id and the thread (missing key),
  or the row (a ciphertext that does not authenticate);
* a store with a keyring refuses a payload held in clear unless opened with
  ``allow_plaintext=True`` (a migration: ``durability store reencrypt`` seals such rows);
* a store without a keyring reads every clear field and says the state is encrypted when asked
  for a sealed one (:class:`~durability.errors.StateEncrypted`);
* a :class:`~durability.crypto.Sealed` state put as it is (a restore from the plane) is stored
  as its envelope, untouched.

Rows of foreign stores (another tool's format, read in place) are never sealed and pass through.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from durability._util import redact_url, short
from durability.crypto.format import ENVELOPE_PREFIX, key_id_of
from durability.errors import PlaintextRefused, StateEncrypted
from durability.model import Checkpoint, PendingWrite
from durability.stores.rows import (
    CheckpointRow,
    EncodedCheckpoint,
    EncodedWrite,
    SaverRow,
    WriteRow,
    utf8_len,
)

if TYPE_CHECKING:
    from durability.crypto.envelope import Sealer
    from durability.stores.base import Store


@dataclass(frozen=True, slots=True)
class Reseal:
    """One checkpoint's state to replace (re-encryption): written only if it still holds ``old``,
    ``size_bytes`` moving by the texts' difference."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    old: str
    new: str

    @property
    def delta(self) -> int:
        """How many bytes the row grows by (``new`` and ``old`` sizes as stored)."""
        return utf8_len(self.new) - utf8_len(self.old)


def write_field(task_id: str, idx: int) -> str:
    """The sealed field of a pending write: ``write`` with its task id and index."""
    return f"write\x00{task_id}\x00{idx}"


def seal_checkpoint(sealer: Sealer, row: EncodedCheckpoint) -> None:
    """Seal ``row``'s state in place (a state already sealed is kept); ``size_bytes`` follows."""
    text = row.state
    if text.startswith(ENVELOPE_PREFIX):
        return
    sealed = sealer.seal(text, row.thread_id, row.namespace, row.checkpoint_id, "state")
    clear_bytes = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    row.state = sealed
    row.size_bytes += len(sealed) - clear_bytes


def seal_write(sealer: Sealer, row: EncodedWrite) -> None:
    """Seal a pending write's value in place."""
    if not row.value.startswith(ENVELOPE_PREFIX):
        field = write_field(row.task_id, row.idx)
        row.value = sealer.seal(row.value, row.thread_id, row.namespace, row.checkpoint_id, field)


def open_checkpoint(store: Store, row: CheckpointRow, action: str) -> Checkpoint:
    """The checkpoint ``row`` holds, its state opened (or refused by the rules above)."""
    if type(row) is not EncodedCheckpoint:
        return row.decode()
    return row.decode(opened_state(store, row, action))


def opened_state(store: Store, row: EncodedCheckpoint | SaverRow, action: str) -> str:
    """``row``'s state as codec text: opened when sealed (or refused by the rules above)."""
    text, sealer = row.state, store.sealer
    if text.startswith(ENVELOPE_PREFIX):
        if sealer is None:
            raise _encrypted(store, action, row.thread_id, row.checkpoint_id, text)
        return sealer.open(text, row.thread_id, row.namespace, row.checkpoint_id, "state")
    if sealer is not None and not store.allow_plaintext:
        raise _clear(store, action, row.thread_id, row.namespace, row.checkpoint_id, "state")
    return text


def open_write(store: Store, row: WriteRow, action: str) -> PendingWrite:
    """The pending write ``row`` holds, its value opened (or refused by the rules above)."""
    if type(row) is not EncodedWrite:
        return row.decode()
    text, sealer = row.value, store.sealer
    if text.startswith(ENVELOPE_PREFIX):
        if sealer is None:
            raise _encrypted(store, action, row.thread_id, row.checkpoint_id, text)
        field = write_field(row.task_id, row.idx)
        return row.decode(sealer.open(text, row.thread_id, row.namespace, row.checkpoint_id, field))
    if sealer is not None and not store.allow_plaintext:
        field = f"write {row.task_id!r}/{row.idx}"
        raise _clear(store, action, row.thread_id, row.namespace, row.checkpoint_id, field)
    return row.decode()


def carry_checkpoint(
    src: Store, dst: Store, row: EncodedCheckpoint, target: str
) -> EncodedCheckpoint:
    """``row`` as a copy into ``dst`` under the thread id ``target`` keeps it: a sealed state is
    re-sealed for its new thread (its associated data binds the old one), a clear state is
    sealed when ``dst`` encrypts; anything else is carried as it is (a re-encryption can move it
    under ``dst``'s current key later)."""
    text = row.state
    if text.startswith(ENVELOPE_PREFIX) and target == row.thread_id:
        return replace(row, seq=None)
    ids = (target, row.namespace, row.checkpoint_id, "state")
    new = _carried(src, dst, text, _ids(row, "state"), ids, "checkpoint")
    if new is None:
        return replace(row, thread_id=target, seq=None)
    size = row.size_bytes + utf8_len(new) - utf8_len(text)
    return replace(row, thread_id=target, seq=None, state=new, size_bytes=size)


def carry_write(src: Store, dst: Store, row: EncodedWrite, target: str) -> EncodedWrite:
    """A pending write as :func:`carry_checkpoint` carries a checkpoint."""
    text = row.value
    if text.startswith(ENVELOPE_PREFIX) and target == row.thread_id:
        return row
    ids = (row.thread_id, row.namespace, row.checkpoint_id, write_field(row.task_id, row.idx))
    value = _carried(src, dst, text, ids, (target, *ids[1:]), "pending write")
    if value is None:
        return replace(row, thread_id=target)
    return replace(row, thread_id=target, value=value)


def _carried(
    src: Store,
    dst: Store,
    text: str,
    ids: tuple[str, str, str, str],
    new_ids: tuple[str, str, str, str],
    what: str,
) -> str | None:
    """A payload text moving from ``ids`` in ``src`` to ``new_ids`` in ``dst``: a sealed one
    opened and sealed again for its new ids, a clear one sealed when ``dst`` encrypts; ``None``
    when it is carried as it is."""
    if text.startswith(ENVELOPE_PREFIX):
        opener = src.sealer or dst.sealer
        if opener is None or dst.sealer is None:
            raise _encrypted(
                src, f"copy a sealed {what} to another thread id", ids[0], ids[2], text
            )
        return dst.sealer.seal(opener.open(text, *ids), *new_ids)
    if dst.sealer is not None:
        return dst.sealer.seal(text, *new_ids)
    return None


def _ids(row: EncodedCheckpoint, field: str) -> tuple[str, str, str, str]:
    return (row.thread_id, row.namespace, row.checkpoint_id, field)


def _encrypted(
    store: Store, action: str, thread_id: str, checkpoint_id: str, text: str
) -> StateEncrypted:
    return StateEncrypted(
        f"cannot {action} of thread {short(thread_id)} (checkpoint {short(checkpoint_id)}): its "
        f"state is encrypted under key {key_id_of(text)!r} and {redact_url(store.url)} was "
        "opened without a keyring; open it with durability.open(url, keyring=…) or set "
        "DURABILITY_ENCRYPTION_KEYS (metadata, threads and frames need no key)"
    )


def _clear(
    store: Store, action: str, thread_id: str, namespace: str, checkpoint_id: str, field: str
) -> PlaintextRefused:
    where = f"thread {short(thread_id)}" + (f" namespace {short(namespace)}" if namespace else "")
    return PlaintextRefused(
        f"cannot {action}: the {field} of checkpoint {short(checkpoint_id)} in {where} is stored "
        f"in clear and {redact_url(store.url)} encrypts (fail-closed); seal the clear rows with "
        f"`durability store reencrypt {redact_url(store.url)}`, or open the store with "
        "allow_plaintext=True while migrating"
    )


__all__ = [
    "Reseal",
    "carry_checkpoint",
    "carry_write",
    "open_checkpoint",
    "open_write",
    "seal_checkpoint",
    "seal_write",
    "write_field",
]
