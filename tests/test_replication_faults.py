"""The outbox invariant under random fault schedules, against the real plane behind the fault layer.

Hypothesis draws a schedule of faults for the plane's ingest door (5xx bursts, 429, redirects,
dropped connections before and after the plane stored the batch, answers slower than the client
waits), whether the domain starts without its entitlement (403 until it is granted), whether the
plane refuses whole batches (compatibility mode) or item by item, where the poison rows sit, and
how many rows are written before connecting. The drain thread runs on an injected backoff of a
few milliseconds. Once the faults stop, every good row is on the plane exactly once and marked
synced, every poison row is quarantined with the plane's reason, and nothing is lost locally.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plane_support import NO_LOCAL_CAPS, PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.replication import connect
from durability.settings import Settings

ROWS = 30
POISON_STEP = "s" * 50
FAULTS = st.sampled_from([None, 500, 502, 503, 429, 408, 302, "drop", "drop-after", "slow"])


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    schedule=st.lists(FAULTS, max_size=8),
    poison=st.sets(st.integers(0, ROWS - 1), max_size=4),
    compat=st.booleans(),
    unentitled=st.booleans(),
    written_before=st.integers(0, ROWS),
)
def test_outbox_invariant_under_random_faults(
    plane: PlaneHandle,
    schedule: list[Any],
    poison: set[int],
    compat: bool,
    unentitled: bool,
    written_before: int,
) -> None:
    """Once faults stop: good rows on the plane exactly once and synced, poison quarantined with the
    plane's reason, every row still in the local store."""
    plane.faults.reset()
    plane.faults.slow_seconds = 0.4
    plane.faults.faults.extend(schedule)
    plane.plane.compat = compat
    key = plane.new_key(entitled=not unentitled)
    folder = tempfile.mkdtemp(prefix="durability-faults-")
    store = durability.open(f"sqlite:///{folder}/store.db", settings=Settings())
    http = httpx.Client(timeout=0.25)

    def row(n: int) -> Checkpoint:
        return Checkpoint(
            thread_id="t-faults",
            checkpoint_id=f"c-{n}",
            node_id=f"step-{n}",
            step=n,
            step_type=POISON_STEP if n in poison else "node",
            state={"n": n, "pad": "p" * 200},
        )

    conn = None
    try:
        for n in range(written_before):
            store.put(row(n))
        conn = connect(
            store, plane.url, key, http=http, backoff=fast_backoff(), limits=NO_LOCAL_CAPS
        )
        for n in range(written_before, ROWS):
            store.put(row(n))  # written while the drain meets the faults
        if unentitled:
            _wait(lambda: plane.faults.ingest_requests > len(schedule), 20, "a refused pass")
            plane.storage.set_entitlement(plane.domain, True)
        _wait(lambda: not store.outbox(state="pending"), 30, "the outbox to empty")
        assert conn.close(timeout=10)

        good = [f"c-{n}" for n in range(ROWS) if n not in poison]
        on_plane = plane.ids_on_plane("t-faults", key)
        assert sorted(on_plane) == sorted(good)
        assert len(on_plane) == len(set(on_plane))
        entries = {e.checkpoint_id: e for e in store.outbox()}
        assert len(entries) == ROWS, "a row was lost locally"
        assert [c.checkpoint_id for c in store.history("t-faults")] == [
            f"c-{n}" for n in range(ROWS)
        ]
        for n in range(ROWS):
            entry = entries[f"c-{n}"]
            if n not in poison:
                assert entry.state == "synced", (n, entry)
                continue
            assert entry.state == "quarantined", (n, entry)
            reason = entry.sync_error or ""
            if compat:
                assert reason.startswith("HTTP 422 from /checkpoints/ingest: "), reason
                assert "step_type is 50 characters, over the 40-character limit" in reason
            else:
                assert (
                    reason
                    == "plane rejected: step_type is 50 characters, over the 40-character limit"
                )
    finally:
        if conn is not None:
            conn.close(timeout=1)
        plane.faults.reset()
        plane.plane.compat = False
        http.close()
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
