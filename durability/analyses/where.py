"""Where the bytes are: by owner, runner and node, by top-level state key, the largest items.

Every function asks the store for sums and top lists (``store.scans``'s aggregates: a
``GROUP BY`` on SQL, chunks of header columns elsewhere), so time and memory follow the number
of groups, not of checkpoints. Only :func:`bytes_by_state_key` reads payloads, and only for a
sample of checkpoints, which its frame says (``attrs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import pandas as pd

from durability import codec
from durability.analyses.common import frame_of
from durability.errors import ConfigError
from durability.stores.base import Store

#: What :func:`bytes_by` groups by, and the store column it reads.
GROUPS = {"owner": "owner", "runner": "runner", "node": "node_id"}
#: The label of rows with no owner / runner / node recorded.
NONE_LABEL = "(none)"


def bytes_by(
    store: Store,
    by: Literal["owner", "runner", "node"],
    *,
    sample: int | None = None,
    seed: int = 0,
    owners: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Bytes and checkpoints per owner (the ledger's, per thread), runner or node (per
    checkpoint), largest first: ``COLUMNS["bytes_by"]`` with the first column named ``by``.

    Summed in the store (:meth:`~durability.stores.aggregates.Aggregates.owner_groups`,
    :meth:`~durability.stores.aggregates.Aggregates.checkpoint_groups`): one row per group.
    ``share`` is the group's fraction of the store's bytes. A thread or checkpoint with no
    owner / runner / node is counted under ``(none)``. ``owners``: a
    :func:`~durability.frames.owners` frame of this store already read, used instead of
    asking the store again (for ``by="owner"``, and for the store's totals of an estimate).

    ``sample=N`` (runner and node only): no index serves those groupings, so instead of every
    checkpoint, about ``N`` picked at random are read
    (:meth:`~durability.stores.aggregates.Aggregates.sample_columns`, ``seed`` fixing the pick)
    and the store's checkpoints and bytes shared out as among them: an estimate, which
    ``attrs`` say (``sampled``, ``population``, ``store_bytes``); ``threads`` then counts the
    sampled threads.
    """
    if by not in GROUPS:
        raise ConfigError(f"cannot group bytes by {by!r}: use one of {sorted(GROUPS)}")
    if by != "owner" and sample is not None:
        return _estimated(store, GROUPS[by], sample, seed, owners).rename(columns={"key": by})
    if by == "owner":
        found = store.scans.owner_groups() if owners is None else _owner_table(owners)
        keys = found["owner"]
    else:
        found = store.scans.checkpoint_groups(GROUPS[by])
        keys = found["key"]
    sums: dict[str, list[int]] = {}
    for key, threads, count, size in zip(
        keys, found["threads"], found["checkpoints"], found["size_bytes"], strict=True
    ):
        entry = sums.setdefault(key or NONE_LABEL, [0, 0, 0])  # None and "" both read (none)
        for i, value in enumerate((threads, count, size)):
            entry[i] += int(value)
    return _frame(sums).rename(columns={"key": by})


def _owner_table(owners: pd.DataFrame) -> dict[str, list[Any]]:
    """A :func:`~durability.frames.owners` frame as the store's answer (missing owner: None)."""
    table = {name: owners[name].tolist() for name in ("threads", "checkpoints", "size_bytes")}
    return table | {"owner": [None if pd.isna(o) else o for o in owners["owner"]]}


def _frame(sums: dict[str, list[int]]) -> pd.DataFrame:
    total = sum(entry[2] for entry in sums.values()) or 1
    ordered = sorted(sums.items(), key=lambda item: (-item[1][2], item[0]))
    rows = [
        {"key": k, "threads": t, "checkpoints": c, "size_bytes": b, "share": b / total}
        for k, (t, c, b) in ordered
    ]
    return frame_of(rows, "bytes_by")


def _estimated(
    store: Store, column: str, sample: int, seed: int, owners: pd.DataFrame | None
) -> pd.DataFrame:
    """:func:`bytes_by` of a checkpoint column from a sample, scaled to the store's totals."""
    if sample < 1:
        raise ConfigError(f"cannot sample {sample} checkpoints: sample at least 1")
    names = ("thread_id", column, "size_bytes")
    picked = store.scans.sample_columns(sample, seed, columns=names)
    if owners is None:
        count, size = store.scans.totals()
    else:
        count, size = int(owners["checkpoints"].sum()), int(owners["size_bytes"].sum())
    groups: dict[str, list[Any]] = {}
    for thread_id, key, row_bytes in zip(*(picked[n] for n in names), strict=True):
        entry = groups.setdefault(key or NONE_LABEL, [set(), 0, 0])
        entry[0].add(thread_id)
        entry[1] += 1
        entry[2] += int(row_bytes or 0)
    rows, row_bytes = len(picked["size_bytes"]) or 1, sum(e[2] for e in groups.values()) or 1
    frame = _frame(
        {
            key: [len(threads), round(n / rows * count), round(b / row_bytes * size)]
            for key, (threads, n, b) in groups.items()
        }
    )
    frame.attrs.update(sampled=len(picked["size_bytes"]), population=count, store_bytes=size)
    return frame


def largest_threads(store: Store, top: int = 20) -> pd.DataFrame:
    """The ``top`` threads holding the most bytes (``COLUMNS["largest_threads"]``), ranked in
    the store (:meth:`~durability.stores.aggregates.Aggregates.top_threads`)."""
    if top < 1:
        raise ConfigError(f"cannot list the top {top}: ask for at least 1")
    return frame_of(_records(store.scans.top_threads(top)), "largest_threads")


def largest_checkpoints(store: Store, top: int = 20) -> pd.DataFrame:
    """The ``top`` largest checkpoints (``COLUMNS["largest_checkpoints"]``), ranked in the
    store (:meth:`~durability.stores.aggregates.Aggregates.top_checkpoints`)."""
    if top < 1:
        raise ConfigError(f"cannot list the top {top}: ask for at least 1")
    return frame_of(_records(store.scans.top_checkpoints(top)), "largest_checkpoints")


def _records(table: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    names = list(table)
    return [dict(zip(names, row, strict=True)) for row in zip(*table.values(), strict=True)]


def bytes_by_state_key(store: Store, *, sample: int = 200, seed: int = 0) -> pd.DataFrame:
    """Bytes per top-level state key, from a sample of ``sample`` checkpoints
    (``COLUMNS["bytes_by_state_key"]``), largest first.

    State is a payload, not a header: only the sampled checkpoints are read and decoded (picked
    at random in the store, :meth:`~durability.stores.aggregates.Aggregates.sample_checkpoints`,
    ``seed`` fixing the pick). ``sample_bytes`` is the
    key's encoded size summed over the sample, ``share`` its fraction of the sampled state
    bytes, and ``estimated_bytes`` that share of the store's bytes — an estimate, which
    ``attrs`` say: ``sampled`` (checkpoints read), ``population`` (checkpoints in the store),
    ``store_bytes``. A state that is not a mapping counts under ``(whole state)``.
    """
    if sample < 1:
        raise ConfigError(f"cannot sample {sample} checkpoints: sample at least 1")
    chosen = store.scans.sample_checkpoints(sample, seed)
    seen, store_bytes = store.scans.totals()
    sums: dict[str, list[int]] = {}
    for thread_id, namespace, checkpoint_id in sorted(chosen):
        state = store.get(thread_id, checkpoint_id, namespace or "").state
        items = state.items() if isinstance(state, dict) else [("(whole state)", state)]
        for name, value in items:
            entry = sums.setdefault(str(name), [0, 0])
            entry[0] += 1
            entry[1] += len(codec.dumps(value).encode())
    total = sum(b for _, b in sums.values()) or 1
    ordered = sorted(sums.items(), key=lambda item: (-item[1][1], item[0]))
    rows = [
        {
            "key": k,
            "checkpoints": c,
            "sample_bytes": b,
            "share": b / total,
            "estimated_bytes": round(b / total * store_bytes),
        }
        for k, (c, b) in ordered
    ]
    frame = frame_of(rows, "bytes_by_state_key")
    frame.attrs.update(sampled=len(chosen), population=seen, store_bytes=store_bytes)
    return frame


__all__ = [
    "GROUPS",
    "NONE_LABEL",
    "bytes_by",
    "bytes_by_state_key",
    "largest_checkpoints",
    "largest_threads",
]
