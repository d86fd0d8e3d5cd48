"""durability: the checkpoint layer of agent and workflow platforms, and a bundle to explain it.

``import durability`` stays light: stores, pandas, matplotlib, widgets and HTTP clients are
imported where they are used.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from durability._version import __version__
from durability.model import (
    Checkpoint,
    Deleted,
    Lease,
    OutboxEntry,
    Park,
    PendingWrite,
    ThreadRecord,
)

if TYPE_CHECKING:
    from durability.stores.base import Store
    from durability.transfer import CopyResult

# A library logs, the application decides where logs go: without this, Python's last-resort
# handler would print every warning (a failed run, say) to stderr, red in a notebook.
logging.getLogger("durability").addHandler(logging.NullHandler())


def open(url: str | None = None, **options: Any) -> Store:
    """Open the checkpoint store at ``url`` (default: ``DURABILITY_URL``, else ``sqlite:///durability.db``).

    Options: ``settings`` (a :class:`durability.settings.Settings`; default from the
    environment), ``clock`` (a callable returning an aware UTC datetime) and provider options
    such as ``single_worker=True`` (SQLite), ``schema=`` (Postgres) or ``prefix=`` (Redis).
    ``keyring`` (a :class:`durability.crypto.Keyring`; default ``DURABILITY_ENCRYPTION_KEYS``)
    seals every state and pending-write value; ``allow_plaintext=True`` lets a store that
    encrypts read rows still held in clear (a migration).
    """
    from durability.settings import Settings
    from durability.stores import open_store

    settings = options.pop("settings", None) or Settings.from_env()
    return open_store(url or settings.url, settings=settings, **options)


def copy(source: Store | str, destination: Store | str, **options: Any) -> CopyResult:
    """Copy threads from one store (or URL) into a durability store; see :mod:`durability.transfer`.

    Options: ``threads``, ``since``, ``owner``, ``rename``, ``progress``, ``chunk_size``;
    :func:`durability.transfer.plan_copy` previews the same copy.
    """
    from durability.transfer import copy as run_copy

    return run_copy(source, destination, **options)


__all__ = [
    "Checkpoint",
    "Deleted",
    "Lease",
    "OutboxEntry",
    "Park",
    "PendingWrite",
    "ThreadRecord",
    "__version__",
    "copy",
    "open",
]
