"""A conformance suite any checkpoint store can be run against.

Every check is a plain function taking a :class:`StoreTarget` and raising ``AssertionError``
on failure, so the suite runs under pytest (``tests/test_conformance.py`` parametrises it over
every provider) or from a script against a custom store::

    from durability.testing import CHECKS, StoreTarget, not_applicable

    target = StoreTarget("sqlite:////tmp/check.db", cross_process=True)
    for check in CHECKS:
        if not_applicable(check, target) is None:
            check(target)

A target names one isolated location (a file, a schema, a key prefix); each ``target.open()``
opens another handle on that same location, which is how reopening, several writers and
several claimers are exercised. The checks are grouped by what they exercise:

============  ===================================================================
``core``      the core contract every store implements (:data:`CORE_CHECKS`)
``ledger``    run starts, finished marks, leases
``parks``     the park rules and one-winner claims
``outbox``    replication state and connection records
``scans``     the whole-store reads: the thread search a picker pages through
``processes`` several processes, and server connections dropped under the store
``tombstones`` erased threads: every later write refused, on every handle
``encryption`` sealed state: round-trip, row binding, fail-closed reads, rotation
              (needs the ``crypto`` extra)
============  ===================================================================
"""

from __future__ import annotations

from durability.testing import (
    core,
    encryption,
    ledger,
    outbox,
    parks,
    processes,
    scans,
    tombstones,
)
from durability.testing.suite import (
    CHECKS,
    START,
    Check,
    StoreTarget,
    check,
    not_applicable,
    raises,
    requires,
)
from durability.testing.values import HOSTILE_IDS, assert_same, rich_state

#: The checks of the core contract alone: what a store of one's own must pass first.
CORE_CHECKS: list[Check] = [c for c in CHECKS if c.__module__ == core.__name__]

#: The checks of each opt-in capability, by the attribute that holds it on a store.
CAPABILITY_CHECKS: dict[str, list[Check]] = {
    module.__name__.rpartition(".")[2]: [c for c in CHECKS if c.__module__ == module.__name__]
    for module in (ledger, parks, outbox, scans, tombstones)
}

#: The checks of customer-held encryption (a store opened with ``keyring=``).
ENCRYPTION_CHECKS: list[Check] = [c for c in CHECKS if c.__module__ == encryption.__name__]

__all__ = [
    "CAPABILITY_CHECKS",
    "CHECKS",
    "CORE_CHECKS",
    "ENCRYPTION_CHECKS",
    "HOSTILE_IDS",
    "START",
    "Check",
    "StoreTarget",
    "assert_same",
    "check",
    "not_applicable",
    "processes",
    "raises",
    "requires",
    "rich_state",
]
