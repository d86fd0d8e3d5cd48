"""The tombstones capability: what keeps an erased thread erased.

A tombstone holds no user data: the HMAC-SHA-256 of the thread id under the store's erasure
secret (its first 32 hex digits), the time and who asked. Every put checks it atomically with
the write (memory: under the store's lock; SQL: inside the insert statement or its
transaction; Redis: in the put script, the tombstone living in the thread's own slot), so a run
still writing to an erased thread is refused, never resurrects it. Ledger run starts and
leases are refused too. A tombstone lives as long as the store (a reset clears it); only an
explicit :meth:`Tombstones.reopen` lets the id be used again.

The secret is made on first use and kept in the store itself (SQL: the meta table; Redis: one
key of the store-wide slot; memory: beside the data), so every worker on the store computes the
same hash; a receipt or a frame can carry the hash without revealing the id to whoever does
not hold the store.
"""

from __future__ import annotations

import hmac
import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from durability._util import redact_url, short
from durability.errors import ThreadErased
from durability.model import Tombstone
from durability.stores.capability import Capability
from durability.stores.ids import check_id, check_thread

if TYPE_CHECKING:
    from durability.stores.base import Store

#: Thread hashes a handle keeps at most before it starts over.
RECENT_HASHES = 4096

#: Bytes of a newly made erasure secret.
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh erasure secret, as the hex text a store keeps."""
    return secrets.token_hex(SECRET_BYTES)


def keyed_hash(secret: bytes, thread_id: str) -> str:
    """The tombstone hash of ``thread_id`` under ``secret``: 32 hex digits of an HMAC-SHA-256."""
    return hmac.digest(secret, thread_id.encode("utf-8", "surrogatepass"), "sha256").hex()[:32]


@dataclass(frozen=True, slots=True)
class EraseRequest:
    """An erasure the plane has not confirmed yet: it waits in the store like an unsent row.

    It holds the thread id (the plane needs it to find its copy) until the plane answers;
    then it is dropped and the tombstone's receipt records the answer.
    """

    thread_id: str
    tombstone: str
    project_id: str
    requested_at: datetime
    attempts: int = 0
    last_error: str | None = None


class Tombstones(Capability, ABC):
    """The erased threads of a store, by keyed hash."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._secret: bytes | None = None
        #: Recent threads' hashes: a run puts many checkpoints on one thread, and an HMAC costs
        #: more than the dict look-up (the cache is this process's memory, never stored).
        self._recent: dict[str, str] = {}

    def hash_of(self, thread_id: str) -> str:
        """The keyed hash a tombstone of ``thread_id`` holds in this store."""
        recent = self._recent
        found = recent.get(thread_id)
        if found is not None:
            return found
        if self._secret is None:
            self.store.ready()  # a backend may read its secret while it sets up
            if self._secret is None:
                self.remember(self._load_secret())
        assert self._secret is not None
        if len(recent) >= RECENT_HASHES:
            recent.clear()
        digest = recent[thread_id] = keyed_hash(self._secret, thread_id)
        return digest

    def remember(self, secret: str) -> None:
        """Keep the store's erasure secret (hex) for this handle's hashes."""
        key = bytes.fromhex(secret)
        if key != self._secret:
            self._secret = key
            self._recent = {}

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or ``None`` if it was never erased (or was reopened)."""
        check_thread(thread_id, "", "look up a tombstone")
        return self._get(thread_id, self.hash_of(thread_id))

    def bury(
        self, thread_id: str, *, by: str = "", at: datetime | None = None, receipt: str = ""
    ) -> Tombstone:
        """Tombstone the thread id: every later write to it is refused (removes nothing).

        Idempotent: a thread already tombstoned keeps its first tombstone, which is returned.
        :meth:`~durability.stores.base.Store.erase` calls this as part of its atomic apply.
        """
        check_thread(thread_id, "", "tombstone a thread")
        check_id(by, "erased_by", action="tombstone a thread", allow_empty=True)
        stone = Tombstone(
            hash=self.hash_of(thread_id),
            erased_at=at if at is not None else self.store.clock(),
            erased_by=by,
            receipt=receipt,
        )
        return self._bury(thread_id, stone)

    def reopen(self, thread_id: str) -> bool:
        """Lift the thread's tombstone so the id can be used for a new thread; ``False`` if it
        had none. The erased data stays gone: this only lets new writes in."""
        check_thread(thread_id, "", "reopen a thread")
        return self._lift(thread_id, self.hash_of(thread_id))

    def record_receipt(self, thread_id: str, receipt: str) -> None:
        """Keep ``receipt`` (JSON, without the thread id) in the thread's tombstone."""
        self._record_receipt(thread_id, self.hash_of(thread_id), receipt)

    def queue_request(self, thread_id: str, project_id: str) -> EraseRequest:
        """Keep a request to erase the thread on the plane of ``project_id`` until it is answered
        (idempotent: a queued request keeps its first time and attempts)."""
        check_thread(thread_id, "", "queue an erase request")
        check_id(project_id, "project_id", action="queue an erase request", allow_empty=True)
        digest = self.hash_of(thread_id)
        request = EraseRequest(thread_id, digest, project_id, self.store.clock())
        return self._put_request(request)

    def requests(self, project_id: str | None = None) -> list[EraseRequest]:
        """The erase requests still waiting (for one project), oldest first."""
        self.store.ready()
        found = [r for r in self._requests() if project_id is None or r.project_id == project_id]
        return sorted(found, key=lambda r: (r.requested_at, r.tombstone))

    def finish_request(self, request: EraseRequest) -> None:
        """Drop an answered request (its thread id leaves the store with it)."""
        self._drop_request(request.tombstone, request.project_id)

    def record_request_attempt(self, request: EraseRequest, error: str) -> EraseRequest:
        """Count one unanswered attempt with the error it met; the request stays queued."""
        tried = replace(request, attempts=request.attempts + 1, last_error=error)
        self._update_request(tried)
        return tried

    def count(self) -> int:
        """How many tombstones the store holds."""
        self.store.ready()
        return self._count()

    def all(self) -> list[Tombstone]:
        """Every tombstone, oldest erasure first."""
        self.store.ready()
        return sorted(self._all(), key=lambda s: (s.erased_at, s.hash))

    def refuse(self, thread_id: str, action: str) -> None:
        """Raise :class:`~durability.errors.ThreadErased` if the thread is tombstoned."""
        stone = self._get(thread_id, self.hash_of(thread_id))
        if stone is not None:
            raise self.refusal(thread_id, action, stone)

    def refusal(self, thread_id: str, action: str, stone: Tombstone | None = None) -> ThreadErased:
        """The refusal of ``action`` on the tombstoned thread (looked up if not given)."""
        if stone is None:
            stone = self._get(thread_id, self.hash_of(thread_id))
        digest = stone.hash if stone is not None else self.hash_of(thread_id)
        when = f" at {stone.erased_at.isoformat()}" if stone is not None else ""
        return ThreadErased(
            f"cannot {action}: thread {short(thread_id)} was erased{when} (tombstone {digest}), "
            "and a write never brings an erased thread back; to use this id for a new thread, "
            f"reopen it first: durability threads reopen {redact_url(self.store.url)} THREAD",
            tombstone=digest,
        )

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _load_secret(self) -> str:
        """The store's erasure secret as hex, made (once, race-safe) on first use."""

    @abstractmethod
    def _get(self, thread_id: str, digest: str) -> Tombstone | None:
        """The tombstone under ``digest`` (``thread_id`` locates it where the backend needs)."""

    @abstractmethod
    def _bury(self, thread_id: str, stone: Tombstone) -> Tombstone:
        """Store ``stone`` unless one is stored already; return the stored one."""

    @abstractmethod
    def _lift(self, thread_id: str, digest: str) -> bool:
        """Remove the tombstone; ``False`` if there was none."""

    @abstractmethod
    def _record_receipt(self, thread_id: str, digest: str, receipt: str) -> None:
        """Replace the stored tombstone's receipt (a no-op without a tombstone)."""

    @abstractmethod
    def _put_request(self, request: EraseRequest) -> EraseRequest:
        """Store the request unless one for its tombstone and project is stored; return the stored."""

    @abstractmethod
    def _requests(self) -> list[EraseRequest]:
        """Every stored request."""

    @abstractmethod
    def _update_request(self, request: EraseRequest) -> None:
        """Replace the stored request's attempts and last error."""

    @abstractmethod
    def _drop_request(self, digest: str, project_id: str) -> None:
        """Remove the request (a no-op if absent)."""

    @abstractmethod
    def _count(self) -> int:
        """How many tombstones are stored."""

    @abstractmethod
    def _all(self) -> list[Tombstone]:
        """Every stored tombstone."""
