"""The parks capability: runs waiting on an async ask, and the atomic claim that resumes one.

A store that can hold parked runs sets ``store.parks`` to a subclass of :class:`Parks`. Only
a store every worker can read may *write* a park (``store.capabilities.can_park``): a paused
run must be readable by whichever worker later resumes it. A SQLite store opened without
``single_worker=True`` still reads the parks a single-worker process wrote.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability import codec
from durability._util import redact_url, short
from durability.errors import ParkRefused
from durability.model import INTERRUPTED, STEP_HITL_PAUSE, Checkpoint, Park
from durability.settings import check_park_deadline
from durability.stores.capability import Capability
from durability.stores.ids import check_thread
from durability.stores.ledger import retention_of
from durability.stores.rows import EncodedCheckpoint, stored

if TYPE_CHECKING:
    from durability.stores.base import Store


#: A park's fields every backend keeps as they are (its context is kept as codec text, its
#: times as each backend keeps times).
_PARK_TEXTS = (
    "thread_id",
    "run_id",
    "checkpoint_id",
    "node_id",
    "runner",
    "reason",
    "deadline_source",
)


def park_texts(park: Park) -> dict[str, str]:
    """What every backend keeps of a park but its times: its text fields, and its context as
    codec text."""
    texts = {name: getattr(park, name) for name in _PARK_TEXTS}
    texts["context"] = codec.dumps(park.context, path="park.context")
    return texts


def park_from_texts(
    texts: Mapping[str, Any], deadline: datetime, created_at: datetime | None
) -> Park:
    """The park :func:`park_texts` kept as ``texts``, with its times."""
    return Park(
        **{name: texts[name] for name in _PARK_TEXTS},
        context=codec.loads(texts["context"], path="park.context"),
        deadline=deadline,
        created_at=created_at,
    )


class Parks(Capability, ABC):
    """The pending parks of a store's threads: at most one per thread."""

    def park(
        self,
        checkpoint: Checkpoint,
        *,
        deadline: datetime | None,
        reason: str = "",
        context: Any = None,
        deadline_source: str = "declared",
        synced: bool = False,
    ) -> tuple[Checkpoint, Park]:
        """Park a run: store its interrupted checkpoint and its pending park, atomically.

        Refused before anything is written when the store cannot hold a park, when the ask has
        no deadline, when the deadline is past the thread's waiting horizon, or when the
        thread already has a pending park. ``deadline_source`` and ``synced`` are for a
        restore, which writes back a park the plane already has.
        """
        store = self.store
        store.ready()
        thread_id = checkpoint.thread_id
        self.check_can_park(thread_id)
        check_thread(thread_id, checkpoint.namespace, "park a run")
        check_park_deadline(
            store.settings,
            retention_of(store.thread(thread_id)),
            thread_id=thread_id,
            now=store.clock(),
            deadline=deadline,
        )
        assert deadline is not None
        context = {} if context is None else context
        cp = checkpoint.evolve(
            status=INTERRUPTED,
            step_type=checkpoint.step_type or STEP_HITL_PAUSE,
            interrupt_reason=reason,
            interrupt_context=context,
        )
        row = store.prepare(cp, action="park a run")
        park = Park(
            thread_id=thread_id,
            deadline=deadline,
            run_id=cp.run_id,
            checkpoint_id=row.checkpoint_id,
            node_id=cp.node_id,
            runner=cp.runner,
            reason=reason,
            context=context,
            created_at=row.created_at,
            deadline_source=deadline_source,
        )
        seq = self._insert(row, park, synced=synced)
        if not synced:
            store.notify_write()
        return stored(cp, row, seq), park

    def check_can_park(self, thread_id: str) -> None:
        """Refuse (:class:`~durability.errors.ParkRefused`) when this store may not write a park."""
        store = self.store
        if store.capabilities.can_park:
            return
        hint = (
            "open it with single_worker=True if the worker that resumes runs on this host"
            if store.provider == "sqlite"
            else "use a shared store (postgres or redis) for runs that park"
        )
        raise ParkRefused(
            f"refusing to park thread {short(thread_id)}: the {store.provider} store "
            f"{redact_url(store.url)} cannot hold a parked run (a paused run must be readable "
            f"by whichever worker resumes it); {hint}"
        )

    def claim(self, thread_id: str) -> Park | None:
        """Atomically take the thread's pending park: exactly one of any number of claimers gets it."""
        check_thread(thread_id, "", "claim a park")
        self.store.ready()
        return self._claim(thread_id)

    def get(self, thread_id: str) -> Park | None:
        """The thread's pending park, or ``None``."""
        check_thread(thread_id, "", "read a park")
        self.store.ready()
        return self._get(thread_id)

    def pending(self) -> list[Park]:
        """Every pending park, oldest deadline first."""
        self.store.ready()
        return sorted(self._pending(), key=lambda p: p.deadline)

    def __call__(self) -> list[Park]:
        """:meth:`pending` (``store.parks()`` reads as it did when parks were a store method)."""
        return self.pending()

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def _insert(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        """Insert the interrupted checkpoint and its park atomically and return the row's
        ``seq``; refuse (:class:`~durability.errors.ParkRefused`) if the thread has a park."""

    @abstractmethod
    def _claim(self, thread_id: str) -> Park | None:
        """Remove and return the thread's park; of concurrent claimers exactly one gets it."""

    @abstractmethod
    def _get(self, thread_id: str) -> Park | None:
        """The thread's park, or ``None``."""

    @abstractmethod
    def _pending(self) -> list[Park]:
        """Every park the store holds (any order)."""


def pending_parks(store: Store) -> list[Park]:
    """The store's pending parks, oldest deadline first (none where it holds no parks)."""
    return [] if store.parks is None else store.parks.pending()


def park_of(store: Store, thread_id: str) -> Park | None:
    """The thread's pending park (``None`` too where the store holds no parks)."""
    return None if store.parks is None else store.parks.get(thread_id)


def claim_park(store: Store, thread_id: str) -> Park | None:
    """Claim the thread's pending park (``None`` too where the store holds no parks)."""
    return None if store.parks is None else store.parks.claim(thread_id)


def park_exists_message(thread_id: str) -> str:
    """The refusal for a second park on a thread."""
    return (
        f"refusing to park thread {thread_id[:80]!r}: it already has a pending park; resume or "
        "claim that one first"
    )
