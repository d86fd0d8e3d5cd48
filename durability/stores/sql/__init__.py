"""The SQL store: SQLite (the embedded default) and Postgres through SQLAlchemy Core.

============================  ============================================================
module                        what it holds
============================  ============================================================
``schema``                    the tables, indexes and the hashes that index long ids
``migrations``                the ordered, recorded, additive schema history
``engine``                    engines, connections, transactions, the error boundary
``statements``                the hot paths' driver SQL and row mapping
``store``                     :class:`SQLStore`: the core contract
``ledger``                    the ledger and parks capabilities
``outbox``                    the outbox capability
``scans``                     the analysis and sweep reads, the sweep's batched delete
============================  ============================================================
"""

from __future__ import annotations

from durability.stores.sql.schema import checkpoint_key, thread_key
from durability.stores.sql.store import SQLStore

__all__ = ["SQLStore", "checkpoint_key", "thread_key"]
