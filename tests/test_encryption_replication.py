"""Sealed state on its way to the real plane (uvicorn on loopback) and back: the plane stores and
serves the envelope untouched and never holds a key; another machine holding the key opens it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from plane_support import PlaneHandle, fast_backoff

import durability
from durability import Checkpoint
from durability.crypto import Keyring, Sealed, is_sealed
from durability.errors import StateEncrypted
from durability.replication import Connection, connect, disconnect
from durability.restore import restore_from_plane
from durability.stores.base import Store
from durability.stores.rows import Select

SECRET = "4111-1111-SECRET"
KEYRING = Keyring({"k-prod": os.urandom(32)})


def link(store: Store, plane: PlaneHandle) -> Connection:
    return connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())


def drained(store: Store, plane: PlaneHandle) -> None:
    conn = link(store, plane)
    assert conn.close(timeout=10)
    assert all(e.state == "synced" for e in store.outbox())


def plane_text(plane: PlaneHandle) -> str:
    """Every row of every table of the plane's database, as text (read directly, not served)."""
    engine = plane.storage.engine
    parts = []
    with engine.connect() as conn:
        for table in sa.inspect(engine).get_table_names():
            parts += [str(tuple(r)) for r in conn.execute(sa.text(f'SELECT * FROM "{table}"'))]
    return "\n".join(parts)


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    opened: list[Store] = []
    yield opened
    for store in opened:
        disconnect(store, timeout=5)
        store.close()


def test_plane_holds_only_ciphertext_and_another_machine_with_the_key_opens_it(
    tmp_path: Path, plane: PlaneHandle, stores: list[Store]
) -> None:
    """Machine A seals and replicates; the plane's database, read directly, holds envelopes and
    no state in clear; machine B restores and reads the state with the key; machine C, without
    the key, restores the same ciphertext untouched and says the state is encrypted; a store
    that does not encrypt keeps working against the same plane."""
    a = durability.open(f"sqlite:///{tmp_path / 'a.db'}", keyring=KEYRING)
    stores.append(a)
    for step in range(3):
        a.put(Checkpoint(thread_id="enc-order", step=step, state={"card": SECRET, "step": step}))
    drained(a, plane)
    held = plane_text(plane)
    assert SECRET not in held
    assert '{"$t":"enc"' in held, "the plane stores the envelope as the state"

    b = durability.open(f"sqlite:///{tmp_path / 'b.db'}", keyring=KEYRING)
    stores.append(b)
    restored = restore_from_plane(b, "enc-order", link(b, plane))
    assert isinstance(restored, Checkpoint)
    assert isinstance(restored.state, Sealed), "a restore writes the envelope, not opened"
    assert [c.state for c in b.history("enc-order")] == [
        a_cp.state for a_cp in a.history("enc-order")
    ]

    c = durability.open("memory://enc-machine-c")
    stores.append(c)
    restore_from_plane(c, "enc-order", link(c, plane))
    with pytest.raises(StateEncrypted, match="'k-prod'"):
        c.latest("enc-order")
    sent = a._select(Select("enc-order", order="seq_desc", limit=1))[0]
    kept = c._select(Select("enc-order", order="seq_desc", limit=1))[0]
    assert is_sealed(kept.state)  # type: ignore[attr-defined]
    assert kept.state == sent.state  # type: ignore[attr-defined]

    clear = durability.open(f"sqlite:///{tmp_path / 'clear.db'}")
    stores.append(clear)
    clear.put(Checkpoint(thread_id="clear-order", state={"note": "public"}))
    drained(clear, plane)
    other = durability.open("memory://enc-machine-d")
    stores.append(other)
    latest = restore_from_plane(other, "clear-order", link(other, plane))
    assert latest is not None
    assert latest.state == {"note": "public"}
