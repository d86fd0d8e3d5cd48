"""The Redis store: plain Redis 7 (no modules), Cluster-ready, one hash tag per thread.

============================  ============================================================
module                        what it holds
============================  ============================================================
``keys``                      the key layout, index entries and members
``documents``                 how checkpoints, writes, parks and ledger fields are written
``scripts`` + ``scripts/``    the Lua scripts (``.lua`` files) and their loader
``store``                     :class:`RedisStore`: plumbing and the core contract
``ledger``                    the ledger and parks capabilities
``outbox``                    the outbox capability
``scans``                     the analysis reads
``reconcile``                 repairing the cross-slot indexes from the threads' keys
============================  ============================================================
"""

from __future__ import annotations

from durability.stores.redis.keys import thread_tag
from durability.stores.redis.store import RedisStore

__all__ = ["RedisStore", "thread_tag"]
