"""The write primitives of a store opened read-only (a foreign store, an archive): each
refuses with the store's own :meth:`ReadOnlyWrites.refuse`, before anything is touched."""

from __future__ import annotations

from abc import abstractmethod

from durability.errors import ReadOnlyStoreError
from durability.model import Deleted
from durability.stores.rows import (
    CheckpointAddress,
    CheckpointKey,
    EncodedCheckpoint,
    EncodedWrite,
    StatusChange,
)


class ReadOnlyWrites:
    """Mixed in before the store class: every write primitive and capability refuses."""

    @abstractmethod
    def refuse(self, action: str) -> ReadOnlyStoreError:
        """The refusal of ``action``: this store is read-only, and what to do instead."""

    def missing(self, capability: str, action: str) -> ReadOnlyStoreError:
        return self.refuse(action)

    def _wipe(self) -> None:
        raise self.refuse("reset the store")

    def _write_generation(self, generation: int) -> None:
        raise self.refuse("record a format generation")

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        raise self.refuse("put checkpoints")

    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        raise self.refuse("store pending writes")

    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        raise self.refuse("delete a thread" if keys is None else "delete checkpoints")

    def _set_status(self, address: CheckpointAddress, change: StatusChange) -> bool:
        raise self.refuse("change a checkpoint's status")


__all__ = ["ReadOnlyWrites"]
