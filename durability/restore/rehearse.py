"""A restore that can be run again: a copy of the store per run, and the thread to bring back.

``restore_runs.ipynb`` restores into a copy of the lost store's replacement made for each run
(:func:`copy_store`), so running it again finds the plane and the store as they were; and it
chooses what to restore with :func:`lost_threads`: the threads the plane holds and the store
lacks, those whose run can be resumed first. Neither writes to the store it is given::

    from durability import frames, restore

    url = restore.copy_store("sqlite:///durability-out/edge.db", Path("durability-out/copies"))
    lost = restore.lost_threads(frames.plane_runs(connection), store)
    lost[lost.resumable].thread_id.iloc[0]
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from durability.errors import ConfigError, InvalidIdError

if TYPE_CHECKING:
    import pandas as pd

    from durability.stores.base import Store

#: Run statuses (as :func:`durability.frames.plane_runs` reads them) a runner can continue: a
#: parked run with its answer, a failed or stalled one from its last real step. In this order.
RESUMABLE = ("parked", "failed", "stalled")


def sqlite_path(store_url: str) -> Path | None:
    """The file of a ``sqlite:///…`` store URL (``None`` for any other store, or in-memory)."""
    if not store_url.startswith("sqlite:///"):
        return None
    path = store_url.removeprefix("sqlite:///").split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def copy_store(store_url: str, folder: Path, *, now: datetime | None = None) -> str:
    """Copy the SQLite store at ``store_url`` into a new file in ``folder``; return its URL.

    The copy is taken with SQLite's online backup (consistent even while a writer is busy) and
    named after the source and the time (``edge-20261201-120000-000000.db``); the source is
    only read.

    Raises:
        ConfigError: ``store_url`` is not a SQLite file, or there is no store at it.
    """
    source = sqlite_path(store_url)
    if source is None:
        raise ConfigError(
            f"cannot copy the store {store_url.split('?', 1)[0]!r}: only a SQLite file "
            "(sqlite:///PATH) is copied; restore into the store itself (copy_store=False)"
        )
    if not source.is_file():
        raise ConfigError(
            f"cannot copy the store {str(source)!r}: there is no such file; run "
            "`durability demo` first, or point store_url at your store"
        )
    folder.mkdir(parents=True, exist_ok=True)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S-%f")
    target = folder / f"{source.stem}-{stamp}.db"
    reader = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    writer = sqlite3.connect(target)
    try:
        reader.backup(writer)
    finally:
        writer.close()
        reader.close()
    return f"sqlite:///{target.resolve()}"


def lost_threads(plane_runs: pd.DataFrame, store: Store) -> pd.DataFrame:
    """The threads ``plane_runs`` holds that ``store`` lacks, one row each (its latest run).

    ``plane_runs`` is :func:`durability.frames.plane_runs`' frame. The rows keep its columns
    plus ``resumable`` (the run is parked, failed or stalled: :data:`RESUMABLE`), and come
    resumable first (parked, then failed, then stalled), then the completed ones, each group
    by thread id.

    Only the plane's thread ids are looked up in ``store`` (``store.thread``: a ledger record
    or a checkpoint), one by one: the cost follows the plane's threads, never the store's.
    """
    candidates = plane_runs.thread_id.dropna().astype(str).unique().tolist()
    local = {t for t in candidates if _held(store, t)}
    missing = plane_runs[~plane_runs.thread_id.isin(local)]
    latest = missing.sort_values(["started_at", "thread_id"]).groupby("thread_id").tail(1)
    status = latest["status"].astype(str)
    rank = status.map({s: n for n, s in enumerate(RESUMABLE)}).fillna(len(RESUMABLE))
    frame = latest.assign(resumable=status.isin(RESUMABLE), _rank=rank)
    return frame.sort_values(["_rank", "thread_id"]).drop(columns="_rank").reset_index(drop=True)


def _held(store: Store, thread_id: str) -> bool:
    """Whether ``store`` knows the thread (an id it could not hold is not held)."""
    try:
        return store.thread(thread_id) is not None
    except InvalidIdError:
        return False
