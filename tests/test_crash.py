"""A process killed while writing loses nothing it was told was stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import durability
from durability.settings import Settings

WRITER = """
import sys, durability
from durability import Checkpoint
from durability.settings import Settings
store = durability.open(sys.argv[1], settings=Settings())
n = 0
while True:
    cp = store.put(Checkpoint(thread_id=f"t{n % 7}", node_id=f"n{n}", state={"n": n, "pad": "x" * (n % 5000)}))
    print(cp.checkpoint_id, flush=True)   # only after put returned
    n += 1
"""


@pytest.mark.parametrize("provider", ["sqlite"])
def test_sigkill_mid_write_loses_no_acknowledged_checkpoint(provider: str, tmp_path: Path) -> None:
    """SIGKILL a writer in a loop: every checkpoint whose put returned is there; the store opens cleanly."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True)
    acknowledged: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while len(acknowledged) < 300 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            acknowledged.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acknowledged += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
    assert len(acknowledged) >= 300
    with durability.open(url, settings=Settings()) as store:
        stored = {cp.checkpoint_id for t in range(7) for cp in store.history(f"t{t}")}
        missing = set(acknowledged) - stored
        assert not missing, f"{len(missing)} acknowledged checkpoints lost"
        store.put(durability.Checkpoint(thread_id="after-crash"))
