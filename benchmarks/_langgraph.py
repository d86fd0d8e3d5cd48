"""One ``saver.put``'s arguments as a LangGraph graph run makes them, for the benchmarks that
drive a checkpoint saver directly (ours and LangGraph's own)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

#: A thread's last checkpoint as the next put needs it: its id (``None``: none yet) and its
#: channel versions.
Previous = tuple[str | None, dict[str, Any]]


def put_args(
    saver: Any, thread: str, previous: Previous, values: dict[str, Any], step: int
) -> tuple[tuple[Any, ...], Previous]:
    """The arguments of ``saver.put`` for a checkpoint of ``values`` in ``thread`` after
    ``previous`` (a uuid6 id, the saver's own next channel versions, ``versions_seen``), and the
    new checkpoint as the next step's ``previous``."""
    from langgraph.checkpoint.base.id import uuid6

    parent, versions = previous
    versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in values}
    cid = str(uuid6(clock_seq=step))
    checkpoint = {
        "v": 4,
        "id": cid,
        "ts": datetime.now(UTC).isoformat(),
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {"agent": dict(versions)},
        "updated_channels": sorted(values),
    }
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    metadata = {"source": "loop", "step": step, "parents": {}}
    return (config, checkpoint, metadata, dict(versions)), (cid, versions)
