"""The encryption view: rows and bytes per key id, and the coverage columns of the other frames.

Read from the envelopes' clear headers (:mod:`durability.crypto.coverage`): no key is needed
and nothing is opened, so an auditor can run it on a store opened without the keyring.
"""

from __future__ import annotations

import pandas as pd

from durability.crypto.coverage import coverage, key_rows
from durability.frames.columns import COLUMNS
from durability.stores.base import Store

#: The columns :func:`~durability.frames.checkpoints` and :func:`~durability.frames.threads`
#: add with ``encryption=True``.
ENCRYPTION_COLUMNS = {"encrypted": "boolean", "key_id": "string"}


def encryption(store: Store, *, sample: int | None = None, seed: int = 0) -> pd.DataFrame:
    """One row per key id (``COLUMNS["encryption"]``): its status against the store's keyring
    (``current``, ``older``, ``missing``, ``clear``), rows, bytes of state and share of rows.

    ``attrs`` holds ``percent_encrypted``, ``clear_rows``, ``retired_rows`` and whether the
    store was opened with a keyring (``encrypting``). ``sample=N``: estimated from the
    envelopes of about ``N`` checkpoints picked at random (every row's is a read of the whole
    store), ``attrs["sampled"]`` saying how many (``None``: every row).
    """
    found = coverage(store, sample=sample, seed=seed)
    total = found.rows or 1
    frame = pd.DataFrame(
        {
            "key_id": pd.array([k.key_id for k in found.by_key], dtype="string"),
            "status": pd.Categorical(
                [k.status for k in found.by_key],
                categories=["current", "older", "missing", "clear"],
            ),
            "rows": pd.array([k.rows for k in found.by_key], dtype="int64"),
            "bytes": pd.array([k.bytes for k in found.by_key], dtype="int64"),
            "share": pd.array([k.rows / total for k in found.by_key], dtype="float64"),
        }
    )
    frame.attrs.update(
        percent_encrypted=found.percent_encrypted,
        clear_rows=found.clear_rows,
        retired_rows=found.retired_rows,
        encrypting=found.encrypting,
        sampled=found.sampled,
    )
    assert list(frame.columns) == list(COLUMNS["encryption"])
    return frame


def with_checkpoint_keys(store: Store, frame: pd.DataFrame, thread_id: str | None) -> pd.DataFrame:
    """``frame`` (a checkpoints frame) with ``encrypted`` and ``key_id`` per row."""
    keys = {
        (r.thread_id, r.namespace, r.checkpoint_id): r.key_id for r in key_rows(store, thread_id)
    }
    found = [
        keys.get(k)
        for k in zip(frame["thread_id"], frame["namespace"], frame["checkpoint_id"], strict=True)
    ]
    frame["encrypted"] = pd.array([k is not None for k in found], dtype="boolean")
    frame["key_id"] = pd.array(found, dtype="string")
    return frame


def with_thread_keys(store: Store, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a threads frame) with ``encrypted`` (every row sealed) and ``key_id`` (the
    newest row's key)."""
    sealed: dict[str, bool] = {}
    newest: dict[str, tuple[int, str | None]] = {}
    for row in key_rows(store):
        sealed[row.thread_id] = sealed.get(row.thread_id, True) and row.key_id is not None
        seq = row.seq or 0
        if row.thread_id not in newest or seq >= newest[row.thread_id][0]:
            newest[row.thread_id] = (seq, row.key_id)
    ids = frame["thread_id"].tolist()
    frame["encrypted"] = pd.array([sealed.get(t) for t in ids], dtype="boolean")
    frame["key_id"] = pd.array([newest.get(t, (0, None))[1] for t in ids], dtype="string")
    return frame


__all__ = ["ENCRYPTION_COLUMNS", "encryption", "with_checkpoint_keys", "with_thread_keys"]
