"""A real LangGraph graph runs durably on every provider through DurabilitySaver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import langgraph_graph as lg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from durability.langgraph import BOOKKEEPING, DurabilitySaver
from durability.stores.parks import pending_parks
from durability.testing import StoreTarget

HERE = Path(__file__).resolve().parent


def _resume_elsewhere(target: StoreTarget, thread_id: str, answer: str) -> dict[str, object]:
    """Resume the graph in a fresh Python process on the same store."""
    options = {k: v for k, v in target.options.items() if isinstance(v, str | bool | int)}
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "langgraph_graph.py"),
            target.url,
            json.dumps(options),
            thread_id,
            answer,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_graph_interrupts_and_resumes(target: StoreTarget) -> None:
    """A StateGraph interrupts (thread waiting, checkpoint interrupted, no park) and resumes to completion.

    Where the provider outlives its process (every one but memory) the resume runs in a fresh process.
    """
    with target.open() as store:
        paused = lg.start(DurabilitySaver(store), "order-42")
        assert paused["__interrupt__"][0].value == {
            "question": "Approve the refund?",
            "amount": Decimal("12.50"),
        }

        waiting = store.latest("order-42")
        assert waiting is not None
        assert (waiting.status, waiting.step_type, waiting.step, waiting.run_id) == (
            "interrupted",
            "langgraph",
            1,
            "run-start",
        )
        assert waiting.node_id == "draft,price", "the nodes whose writes made the checkpoint"
        assert waiting.interrupt_reason == "waiting for input in approve"
        assert waiting.interrupt_context["node"] == "approve"
        assert waiting.interrupt_context["interrupts"][0]["value"]["amount"] == Decimal("12.50")
        assert pending_parks(store) == [], "a LangGraph interrupt is a waiting thread, not a park"
        assert [c.node_id for c in store.history("order-42")] == [
            "__input__",
            "__start__",
            "draft,price",
        ]
        assert isinstance(waiting.state["messages"][1], AIMessage), "LangChain messages round-trip"

        if target.url.startswith("memory://"):
            import asyncio

            final = asyncio.run(lg.resume(DurabilitySaver(target.open()), "order-42", "yes"))
            result = {
                "decision": final["decision"],
                "messages": [m.content for m in final["messages"]],
                "amount": str(final["amount"]),
            }
        else:
            result = _resume_elsewhere(target, "order-42", "yes")
        assert result == {
            "decision": "yes",
            "messages": ["Refund order 42", "Refund drafted.", "Decision: yes"],
            "amount": "12.50",
        }

        history = store.history("order-42")
        assert [c.status for c in history] == ["completed"] * 4, (
            "resumed: the interrupted checkpoint is completed again"
        )
        done = history[-1]
        assert (done.node_id, done.step, done.run_id) == ("approve", 2, "run-resume")
        assert isinstance(done.state["messages"][2], HumanMessage)
        assert done.metadata[BOOKKEEPING]["channel_versions"], "versions kept with the checkpoint"
        state = lg.build(DurabilitySaver(store)).get_state(
            {"configurable": {"thread_id": "order-42"}}
        )
        assert state.values["decision"] == "yes"
        assert state.next == ()
        record = store.thread("order-42")
        assert record is not None
        assert record.checkpoints == 4
        if store.outbox is not None:
            assert len(store.outbox(state="pending", thread_id="order-42")) == 4, (
                "LangGraph checkpoints replicate like any other"
            )


class XorCipher:
    """A stand-in cipher (LangGraph's AES one needs pycryptodome): reversible, and no clear text."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ 0x5A for b in ciphertext)


def test_encrypted_serde_keeps_values_as_typed_bytes(target: StoreTarget) -> None:
    """With serde=EncryptedSerializer, state is stored as its ciphertext and the graph still resumes."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from durability.model import TypedValue

    serde = EncryptedSerializer(XorCipher())
    with target.open() as store:
        lg.start(DurabilitySaver(store, serde=serde), "secret")
        waiting = store.latest("secret")
        assert waiting is not None
        assert waiting.status == "interrupted"
        blob = waiting.state["amount"]
        assert isinstance(blob, TypedValue)
        assert blob.type == "msgpack+xor"
        assert b"12.50" not in blob.data
        assert "value" not in waiting.interrupt_context["interrupts"][0], (
            "no clear value in the context"
        )
        import asyncio

        final = asyncio.run(lg.resume(DurabilitySaver(store, serde=serde), "secret", "no"))
        assert final["decision"] == "no"
        assert final["amount"] == Decimal("12.50")


def test_get_tuple_opens_a_sealed_state_and_its_writes(target: StoreTarget) -> None:
    """Over a store with a keyring, get_tuple (latest and by id) opens the sealed state and
    pending writes it reads in one go; a handle without the keys refuses, naming the state."""
    from durability.crypto import Keyring, is_sealed
    from durability.errors import StateEncrypted
    from durability.stores.rows import Select

    keyring = Keyring({"k1": bytes(range(32))})
    with target.open(keyring=keyring) as store:
        saver = DurabilitySaver(store)
        config = {"configurable": {"thread_id": "sealed", "checkpoint_ns": ""}}
        checkpoint = {
            "v": 4,
            "id": "1ef0000000000000000000000000a",
            "ts": "2026-12-03T00:00:00+00:00",
            "channel_values": {"secret": "words " * 20},
            "channel_versions": {"secret": saver.get_next_version(None, None)},
            "versions_seen": {},
            "updated_channels": ["secret"],
        }
        stored = saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})  # type: ignore[arg-type]
        saver.put_writes(stored, [("secret", "pending words"), ("other", 2)], "task-1")
        row = store._select(Select("sealed", ""))[0]
        assert is_sealed(row.state), "the state is sealed at rest"  # type: ignore[attr-defined]
        for asked in (config, stored):
            got = saver.get_tuple(asked)  # type: ignore[arg-type]
            assert got is not None
            assert got.checkpoint["channel_values"] == {"secret": "words " * 20}
            assert got.pending_writes == [
                ("task-1", "secret", "pending words"),
                ("task-1", "other", 2),
            ]
    if target.cross_process:  # a handle on the same rows, opened without the keys
        with target.open() as keyless, pytest.raises(StateEncrypted):
            DurabilitySaver(keyless).get_tuple(config)  # type: ignore[arg-type]


def test_a_non_langgraph_thread_is_refused_clearly(target: StoreTarget) -> None:
    """Reading a thread the durability runner wrote as a LangGraph thread fails, naming it."""
    from durability import Checkpoint
    from durability.errors import StoreError

    with target.open() as store:
        store.put(Checkpoint(thread_id="runner-thread", node_id="fetch"))
        saver = DurabilitySaver(store)
        with pytest.raises(StoreError, match="not written by a LangGraph saver"):
            saver.get_tuple({"configurable": {"thread_id": "runner-thread"}})
        assert list(saver.list(None)) == [], "list(None) skips checkpoints of other kinds"


def test_the_sweep_and_marks_apply_to_langgraph_threads(target: StoreTarget) -> None:
    """An interrupted graph is a waiting thread (never spared as a park): on postgres and sqlite
    the sweep deletes it once idle past the waiting retention, on redis and memory that horizon
    is skipped; a finished graph thread the owner marked goes its finished retention later."""
    from datetime import UTC, datetime, timedelta

    from durability.clock import FrozenClock
    from durability.settings import Settings
    from durability.sweep import plan_sweep, sweep

    clock = FrozenClock(datetime.now(UTC))
    settings = Settings(waiting_retention="30d", finished_retention="7d")
    with target.open(clock=clock, settings=settings) as store:
        lg.start(DurabilitySaver(store), "asking")
        lg.start(DurabilitySaver(store), "answered")
        lg.resume_sync(DurabilitySaver(store), "answered", "yes")
        store.mark_finished("answered")

        clock.advance(timedelta(days=7, seconds=1))
        result = sweep(store)
        assert result.deleted_ids("finished") == ["answered"]
        assert result.checkpoints("finished") == 4
        assert not store.has_thread("answered")

        clock.advance(timedelta(days=23))
        row = {r.thread_id: r for r in plan_sweep(store).rows}["asking"]
        if store.capabilities.sweeps_waiting:
            assert (row.horizon, row.action) == ("waiting", "delete"), row.reason
            assert sweep(store).deleted_ids("waiting") == ["asking"]
            assert not store.has_thread("asking")
        else:
            assert (row.horizon, row.action) == ("waiting", "skipped")
            assert sweep(store).deleted_ids() == []
            assert store.has_thread("asking")
