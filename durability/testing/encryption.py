"""The encryption checks: a store opened with a keyring seals state and pending-write values,
binds each ciphertext to its row, fails closed, and rotates keys (needs the ``crypto`` extra)."""

from __future__ import annotations

from durability.crypto import Keyring, Sealed, is_sealed, key_id_of
from durability.errors import DecryptionFailed, KeyMissing, PlaintextRefused, StateEncrypted
from durability.model import Checkpoint, PendingWrite
from durability.stores import Store
from durability.stores.rows import EncodedCheckpoint, Select
from durability.testing.suite import StoreTarget, check, raises, requires

#: Test keys (never use fixed keys outside a test).
KEY_1 = bytes(range(32))
KEY_2 = bytes(range(32, 64))
RING_1 = Keyring({"k1": KEY_1})
SECRET = {"messages": [{"role": "user", "content": "my card is 4111 1111 1111 1111"}] * 8}


def stored_state(store: Store, thread_id: str, namespace: str = "") -> str:
    """The latest row's state text exactly as the backend holds it."""
    rows = store._select(Select(thread_id, namespace, order="seq_desc", limit=1))
    assert rows, f"no row in {thread_id!r}"
    row = rows[0]
    assert isinstance(row, EncodedCheckpoint)
    return row.state


@check
@requires("crypto")
def check_sealed_round_trip_and_clear_metadata(target: StoreTarget) -> None:
    """State and write values are stored sealed and read back equal; a handle without the
    keyring reads every clear field and says the state is encrypted."""
    with target.open(keyring=RING_1) as store, target.open() as keyless:
        cp = store.put(Checkpoint(thread_id="enc-a", namespace="ns", node_id="n1", state=SECRET))
        write = PendingWrite(
            thread_id="enc-a", namespace="ns", checkpoint_id=cp.checkpoint_id, task_id="t",
            idx=0, channel="messages", value={"card": "4111"},
        )  # fmt: skip
        store.put_writes([write])
        text = stored_state(store, "enc-a", "ns")
        assert is_sealed(text)
        assert "4111" not in text
        assert key_id_of(text) == "k1"
        assert (cp.size_bytes or 0) >= len(text), "size counts the envelope"
        got = store.latest("enc-a", "ns")
        assert got is not None
        assert got.state == SECRET
        assert got.node_id == "n1"
        assert store.writes("enc-a", cp.checkpoint_id, "ns")[0].value == {"card": "4111"}
        record = keyless.thread("enc-a")
        assert record is not None
        assert record.checkpoints == 1
        raises(StateEncrypted, lambda: keyless.latest("enc-a", "ns"), contains="'k1'")
        raises(StateEncrypted, lambda: keyless.writes("enc-a", cp.checkpoint_id, "ns"))


@check
@requires("crypto")
def check_ciphertext_is_bound_to_its_row(target: StoreTarget) -> None:
    """A row's envelope put into another row (kept as it is, as a restore keeps it) does not
    open there, and a tampered envelope fails naming the row."""
    with target.open(keyring=RING_1) as store:
        store.put(Checkpoint(thread_id="enc-b1", checkpoint_id="c1", state=SECRET))
        envelope = stored_state(store, "enc-b1")
        store.put(Checkpoint(thread_id="enc-b2", checkpoint_id="c1", state=Sealed(envelope)))
        assert stored_state(store, "enc-b2") == envelope, "a Sealed state is stored untouched"
        raises(DecryptionFailed, lambda: store.latest("enc-b2"), contains="'enc-b2'")
        tampered = envelope.replace('"c":"', '"c":"AAAA', 1)
        store.put(Checkpoint(thread_id="enc-b1", checkpoint_id="c2", state=Sealed(tampered)))
        raises(DecryptionFailed, lambda: store.get("enc-b1", "c2"), contains="'c2'")
        assert store.get("enc-b1", "c1").state == SECRET


@check
@requires("crypto")
def check_wrong_missing_key_and_clear_rows_fail_closed(target: StoreTarget) -> None:
    """A key of the right id but other bytes does not open; an unknown key id fails naming the
    key and the thread; a clear row is refused unless the store allows plaintext."""
    with target.open(keyring=RING_1) as store, target.open() as keyless:
        store.put(Checkpoint(thread_id="enc-c", state=SECRET))
        keyless.put(Checkpoint(thread_id="enc-clear", state=SECRET))
        with target.open(keyring=Keyring({"k1": KEY_2})) as wrong:
            raises(DecryptionFailed, lambda: wrong.latest("enc-c"))
        with target.open(keyring=Keyring({"k2": KEY_2})) as other:
            raises(KeyMissing, lambda: other.latest("enc-c"), contains="'enc-c'")
            raises(KeyMissing, lambda: other.latest("enc-c"), contains="'k1'")
        raises(PlaintextRefused, lambda: store.latest("enc-clear"), contains="reencrypt")
        with target.open(keyring=RING_1, allow_plaintext=True) as migrating:
            got = migrating.latest("enc-clear")
            assert got is not None
            assert got.state == SECRET


@check
@requires("crypto")
def check_rotation_keeps_old_rows_readable(target: StoreTarget) -> None:
    """A new key listed first seals new writes; rows under the old key still open while it is
    listed, and a keyring without the new key cannot read the new rows."""
    with target.open(keyring=RING_1) as old:
        old.put(Checkpoint(thread_id="enc-d", checkpoint_id="before", state={"v": 1}))
    rotated = Keyring({"k2": KEY_2, "k1": KEY_1})
    with target.open(keyring=rotated) as store, target.open(keyring=RING_1) as old:
        store.put(Checkpoint(thread_id="enc-d", checkpoint_id="after", state={"v": 2}))
        assert key_id_of(stored_state(store, "enc-d")) == "k2"
        assert [c.state for c in store.history("enc-d")] == [{"v": 1}, {"v": 2}]
        raises(KeyMissing, lambda: old.get("enc-d", "after"), contains="'k2'")


class _Killed(Exception):
    """Stands for a kill in the middle of a re-encryption."""


def _kill_after_first_batch(done: int, _planned: int) -> None:
    raise _Killed(done)


@check
@requires("crypto")
def check_reencryption_killed_and_resumed(target: StoreTarget) -> None:
    """The plan counts rows by key id (clear ones too); a run killed after its first batch
    leaves every row readable by the old key or the new one; planning again finds the rest, and
    afterwards the new key alone reads every row."""
    from durability.crypto.reencrypt import apply_reencrypt, plan_reencrypt

    with target.open(keyring=RING_1) as old, target.open() as keyless:
        for n in range(12):
            old.put(Checkpoint(thread_id=f"enc-r{n % 3}", step=n, state={"n": n, "s": SECRET}))
        keyless.put(Checkpoint(thread_id="enc-r0", step=99, state={"clear": True}))
    rotated = Keyring({"k2": KEY_2, "k1": KEY_1})
    with target.open(keyring=rotated, allow_plaintext=True) as store:
        plan = plan_reencrypt(store)
        counts = {k.key_id: k.rows for k in plan.by_key}
        assert counts == {"k1": 12, None: 1}, counts
        assert plan.rows == 13
        raises(
            _Killed, lambda: apply_reencrypt(store, plan, batch=5, progress=_kill_after_first_batch)
        )
        states = [
            c.state["n"] for t in range(3) for c in store.history(f"enc-r{t}") if "n" in c.state
        ]
        assert sorted(states) == list(range(12)), "every row still reads during the migration"
        left = plan_reencrypt(store)
        assert left.rows == 8, left.to_json()
        report = apply_reencrypt(store, left, batch=5)
        assert report.rows == 8
        assert plan_reencrypt(store).empty
    with target.open(keyring=Keyring({"k2": KEY_2})) as new_only:
        assert len(new_only.history("enc-r0")) == 5
        assert all(is_sealed(stored_state(new_only, f"enc-r{t}")) for t in range(3))
