"""What every capability of a store shares: the store it belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durability.stores.base import Store


class Capability:
    """A part of a store with an interface of its own (its ledger, parks, outbox, scans)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.store!r}>"
