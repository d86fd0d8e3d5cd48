"""Write listeners: who a store tells that unreplicated rows were committed.

The replication drain listens so that it wakes on a write instead of polling; a store calls
:meth:`WriteListeners.notify_write` after every commit of rows the plane does not have yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from durability.stores.base import Store

logger = logging.getLogger(__name__)

#: Called with the store after a write of unreplicated rows commits (see ``add_write_listener``).
WriteListener = Callable[["Store"], None]


class WriteListeners:
    """The write listeners of a store (a part of :class:`~durability.stores.base.Store`)."""

    def __init__(self) -> None:
        self._write_listeners: list[WriteListener] = []

    def add_write_listener(self, listener: WriteListener) -> None:
        """Call ``listener(store)`` after every committed write of unreplicated rows.

        ``put``, ``put_many`` and ``park`` call it after their commit (not for ``synced=True``
        writes, which have nothing to send). It runs on the writer's thread, so it must be quick
        and must not block: the replication drain uses it to set an event. An exception it
        raises is logged and never reaches the writer.
        """
        if listener not in self._write_listeners:
            self._write_listeners.append(listener)

    def remove_write_listener(self, listener: WriteListener) -> None:
        """Stop calling ``listener`` (a no-op if it was not added)."""
        if listener in self._write_listeners:
            self._write_listeners.remove(listener)

    def notify_write(self) -> None:
        """Tell the write listeners that unreplicated rows were committed."""
        for listener in tuple(self._write_listeners):
            try:
                listener(cast("Store", self))
            except Exception:  # a listener must never fail the write that already committed
                logger.exception("a write listener of %r failed", self)
