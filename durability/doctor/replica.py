"""The plane check: per thread, what the store marks synced against what the plane holds.

Counts and a checksum of the checkpoint ids per thread (the plane's digest route), never a
state; only a thread whose digest differs is asked for its ids, to name the rows it lacks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durability._util import chunks
from durability.doctor.model import Check, Context, named
from durability.replication.wire import ROW_KEY, ids_checksum, wire_checkpoint_id

if TYPE_CHECKING:
    from durability.replication.client import PlaneClient
    from durability.stores.base import Store

#: How many threads one digest request names (the plane's cap).
DIGEST_BATCH = 1000

Finding = tuple[str | None, list[Any], str]


@dataclass(frozen=True)
class Replica:
    """The plane a store replicates to, as the doctor reads it: a client with the project's
    key, the local project whose rows it holds, and whether it keys rows by the store's ids."""

    client: PlaneClient
    project_id: str
    own_ids: bool

    @classmethod
    def of(cls, client: PlaneClient, project_id: str = "") -> Replica:
        """The replica of the store's local project ``project_id`` (the one its connection
        replicates); asks the plane (``auth/check``) how it keys rows."""
        features = client.auth_check().get("features")
        own = isinstance(features, dict) and features.get("checkpoint_key") == list(ROW_KEY)
        return cls(client, project_id, own)


def synced_rows(store: Store, replica: Replica) -> dict[str, dict[str, tuple[str, str, int]]]:
    """Per thread, the rows of the key's project the store marks synced: wire id → (namespace,
    checkpoint id, seq)."""
    found: dict[str, dict[str, tuple[str, str, int]]] = defaultdict(dict)
    for chunk in store.outbox_columns():
        columns = zip(
            chunk["thread_id"],
            chunk["namespace"],
            chunk["checkpoint_id"],
            chunk["seq"],
            chunk["project_id"],
            chunk["synced"],
            chunk["sync_error"],
            strict=True,
        )
        for thread, ns, cid, seq, project, synced, error in columns:
            if synced and error is None and (project or "") == replica.project_id:
                wire = cid if replica.own_ids else wire_checkpoint_id(thread, ns, cid)
                found[thread][wire] = (ns, cid, int(seq))
    return dict(found)


def replica_gaps(store: Store, replica: Replica) -> dict[str, list[tuple[str, str, int]]]:
    """Per thread, the rows the store marks synced that the plane does not hold."""
    rows = synced_rows(store, replica)
    gaps: dict[str, list[tuple[str, str, int]]] = {}
    for batch in chunks(sorted(rows), DIGEST_BATCH):
        for item in replica.client.digest(batch):
            thread = item.get("execution_id")
            if thread not in rows or item.get("checksum") == ids_checksum(rows[thread]):
                continue
            [detail] = replica.client.digest([thread], ids=True)
            held = set(detail.get("checkpoint_ids") or ())
            lacking = [row for wire, row in rows[thread].items() if wire not in held]
            if lacking:
                gaps[thread] = sorted(lacking, key=lambda r: r[2])
    return gaps


def _replica_short(ctx: Context) -> Iterator[Finding]:
    assert ctx.replica is not None
    for thread_id, lacking in sorted(replica_gaps(ctx.store, ctx.replica).items()):
        yield (
            thread_id,
            lacking,
            f"the plane lacks {len(lacking)} checkpoints the store marks synced (project "
            f"{ctx.replica.project_id!r}): {named([cid for _ns, cid, _seq in lacking])}",
        )


REPLICA_SHORT = Check(
    "replica_short",
    "error",
    "a thread whose replica on the plane lacks rows the store marks synced (with --plane)",
    _replica_short,
    fix="durability doctor {url} --plane TARGET --fix",
    repair="requeue_missing_rows",
    applies=lambda ctx: ctx.replica is not None and ctx.store.outbox is not None,
    unless="no --plane given, or the store keeps no outbox",
)

CHECKS = (REPLICA_SHORT,)
