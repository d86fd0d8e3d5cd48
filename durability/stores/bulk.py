"""The bulk load: an opt-in capability for writing many new rows at once (a copy's destination).

A store that has one sets ``store.bulk``; :func:`durability.copy` then hands it each chunk of
checkpoints with their pending writes instead of putting them through the store's per-row
insert. The promises are the insert's: one transaction, nothing written when any checkpoint id
is already stored (:class:`~durability.errors.CheckpointConflict`) or any thread is erased
(:class:`~durability.errors.ThreadErased`); the writes follow LangGraph's rules (a regular
write keeps the first value, a special one overwrites); the outbox queues the rows as a put
would. Rows come encoded (and sealed) as the store keeps them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from durability.stores.capability import Capability
from durability.stores.rows import EncodedCheckpoint, EncodedWrite


class BulkLoad(Capability):
    """Loads new checkpoints and their pending writes in one transaction (see the module)."""

    @abstractmethod
    def load(
        self, checkpoints: Sequence[EncodedCheckpoint], writes: Sequence[EncodedWrite]
    ) -> None:
        """Write ``writes`` then ``checkpoints`` in one transaction, or nothing."""


__all__ = ["BulkLoad"]
