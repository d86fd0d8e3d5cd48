"""durability: the checkpoint layer of agent and workflow platforms, and a bundle to explain it."""

from durability._version import __version__
from durability.model import Checkpoint, Deleted, Lease, OutboxEntry, Park, PendingWrite, ThreadRecord

__all__ = [
    "Checkpoint",
    "Deleted",
    "Lease",
    "OutboxEntry",
    "Park",
    "PendingWrite",
    "ThreadRecord",
    "__version__",
]
