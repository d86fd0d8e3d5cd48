"""Where the bytes are: by owner, runner and node, by top-level state key, the largest items.

Every function reads the store's header columns in chunks (sizes, ids, times: no payload) and
reduces each chunk as it comes, so memory follows the number of groups, not of checkpoints.
Only :func:`bytes_by_state_key` reads payloads, and only for a sample of checkpoints, which
its frame says (``attrs``).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from durability import codec
from durability.analyses.common import frame_of, header_chunks, thread_chunks
from durability.errors import ConfigError
from durability.stores.base import Store
from durability.stores.scans import Columns

try:
    import pandas as pd
except ModuleNotFoundError as exc:  # pragma: no cover - the notebook extra
    from durability._extras import missing_extra

    raise missing_extra(exc, "durability.analyses") from exc

#: What :func:`bytes_by` groups by, and the store column it reads.
GROUPS = {"owner": "owner", "runner": "runner", "node": "node_id"}
#: The label of rows with no owner / runner / node recorded.
NONE_LABEL = "(none)"


def bytes_by(store: Store, by: Literal["owner", "runner", "node"]) -> pd.DataFrame:
    """Bytes and checkpoints per owner (the ledger's, per thread), runner or node (per
    checkpoint), largest first: ``COLUMNS["bytes_by"]`` with the first column named ``by``.

    ``share`` is the group's fraction of the store's bytes. A thread or checkpoint with no
    owner / runner / node is counted under ``(none)``.
    """
    if by not in GROUPS:
        raise ConfigError(f"cannot group bytes by {by!r}: use one of {sorted(GROUPS)}")
    column = GROUPS[by]
    sums: dict[str, list[int]] = {}
    pairs: set[tuple[str, str]] = set()
    if by == "owner":
        for chunk in thread_chunks(store, ("thread_id", "owner", "checkpoints", "size_bytes")):
            for owner, count, size in zip(
                chunk["owner"], chunk["checkpoints"], chunk["size_bytes"], strict=True
            ):
                entry = sums.setdefault(owner or NONE_LABEL, [0, 0, 0])
                entry[0] += 1
                entry[1] += int(count)
                entry[2] += int(size or 0)
    else:
        for chunk in header_chunks(store, ("thread_id", column, "size_bytes")):
            for thread_id, key, size in zip(
                chunk["thread_id"], chunk[column], chunk["size_bytes"], strict=True
            ):
                name = key or NONE_LABEL
                entry = sums.setdefault(name, [0, 0, 0])
                if (name, thread_id) not in pairs:
                    pairs.add((name, thread_id))
                    entry[0] += 1
                entry[1] += 1
                entry[2] += int(size or 0)
    total = sum(entry[2] for entry in sums.values()) or 1
    ordered = sorted(sums.items(), key=lambda item: (-item[1][2], item[0]))
    rows = [
        {"key": k, "threads": t, "checkpoints": c, "size_bytes": b, "share": b / total}
        for k, (t, c, b) in ordered
    ]
    return frame_of(rows, "bytes_by").rename(columns={"key": by})


def largest_threads(store: Store, top: int = 20) -> pd.DataFrame:
    """The ``top`` threads holding the most bytes (``COLUMNS["largest_threads"]``)."""
    names = ("thread_id", "owner", "checkpoints", "size_bytes", "newest_at")
    rows = (row for chunk in thread_chunks(store, names) for row in _rows(chunk, names))
    return frame_of(_top(rows, top, size=3, ident=0, names=names), "largest_threads")


def largest_checkpoints(store: Store, top: int = 20) -> pd.DataFrame:
    """The ``top`` largest checkpoints (``COLUMNS["largest_checkpoints"]``)."""
    names = ("thread_id", "namespace", "checkpoint_id", "node_id", "runner", "created_at")
    wanted = (*names, "size_bytes")
    rows = (row for chunk in header_chunks(store, wanted) for row in _rows(chunk, wanted))
    return frame_of(_top(rows, top, size=-1, ident=2, names=wanted), "largest_checkpoints")


def _rows(chunk: Columns, names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    return zip(*(chunk[n] for n in names), strict=True)


def _top(
    rows: Iterable[tuple[Any, ...]], top: int, *, size: int, ident: int, names: Sequence[str]
) -> list[dict[str, Any]]:
    """The ``top`` rows largest by ``row[size]`` (ties by ``row[ident]``), largest first; a
    heap of ``top`` items, whatever the number of rows."""
    if top < 1:
        raise ConfigError(f"cannot list the top {top}: ask for at least 1")
    best: list[tuple[int, str, int, tuple[Any, ...]]] = []
    for index, row in enumerate(rows):
        item = (int(row[size] or 0), str(row[ident]), -index, row)
        (heapq.heappush if len(best) < top else heapq.heappushpop)(best, item)
    best.sort(key=lambda item: (-item[0], item[1]))
    return [dict(zip(names, item[3], strict=True)) for item in best]


def bytes_by_state_key(store: Store, *, sample: int = 200, seed: int = 0) -> pd.DataFrame:
    """Bytes per top-level state key, from a sample of ``sample`` checkpoints
    (``COLUMNS["bytes_by_state_key"]``), largest first.

    State is a payload, not a header: only the sampled checkpoints are read and decoded (a
    uniform reservoir sample over every checkpoint, ``seed`` fixing it). ``sample_bytes`` is the
    key's encoded size summed over the sample, ``share`` its fraction of the sampled state
    bytes, and ``estimated_bytes`` that share of the store's bytes — an estimate, which
    ``attrs`` say: ``sampled`` (checkpoints read), ``population`` (checkpoints in the store),
    ``store_bytes``. A state that is not a mapping counts under ``(whole state)``.
    """
    if sample < 1:
        raise ConfigError(f"cannot sample {sample} checkpoints: sample at least 1")
    rng = random.Random(seed)
    chosen: list[tuple[str, str, str]] = []
    seen = store_bytes = 0
    for chunk in header_chunks(store, ("thread_id", "namespace", "checkpoint_id", "size_bytes")):
        for key in zip(chunk["thread_id"], chunk["namespace"], chunk["checkpoint_id"], strict=True):
            seen += 1
            if len(chosen) < sample:
                chosen.append(key)
            elif (slot := rng.randrange(seen)) < sample:
                chosen[slot] = key
        store_bytes += sum(int(s or 0) for s in chunk["size_bytes"])
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
