"""The wire item: exactly fastaiagent's shape, and lossless for this project's own checkpoints."""

from __future__ import annotations

import base64
import decimal
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from plane_support import WIRE_KEYS

from durability import Checkpoint
from durability.errors import RestoreError
from durability.replication import (
    CODEC_MARK,
    checkpoint_from_wire,
    checkpoint_to_wire,
    is_durability_item,
    resource_type,
    was_stripped,
)
from durability.replication.outbox import PlaneLimits
from durability.replication.wire import to_wire
from durability.stores.rows import EncodedCheckpoint
from durability.testing import assert_same, rich_state

WHEN = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)

METADATA_KEYS = [
    "node_input",
    "node_output",
    "iteration",
    "iteration_counters",
    "interrupt_reason",
    "interrupt_context",
    "agent_path",
    "chain_name",
]


def full_checkpoint(**changes: Any) -> Checkpoint:
    cp = Checkpoint(
        thread_id="exec-1",
        checkpoint_id="cp-1",
        namespace="child:2",
        run_id="run-9",
        parent_checkpoint_id="cp-0",
        runner="helper",
        agent_id="local-agent",
        agent_path="agent:helper/tool:lookup",
        node_id="turn:3/tool:lookup",
        step=3,
        step_type="tool_call",
        status="interrupted",
        state=rich_state(),
        node_input={"q": "weather", "at": WHEN},
        node_output=("a tuple", 1),
        iteration=2,
        iteration_counters={"loop": 4},
        interrupt_reason="needs approval",
        interrupt_context={"amount": decimal.Decimal("12.50")},
        created_at=WHEN,
        metadata={"user": {"tags": {"a", "b"}}, "n": 1},
        project_id="shop",
        seq=41,
    )
    return cp.evolve(**changes)


def test_item_has_fastaiagents_keys_in_order() -> None:
    """The item carries exactly the fastaiagent keys in their order, plus the extension."""
    item = checkpoint_to_wire(full_checkpoint())
    assert list(item) == WIRE_KEYS
    assert list(item["metadata"]) == [*METADATA_KEYS, "durability"]
    assert item["metadata"]["durability"]["codec"] == CODEC_MARK
    assert item["execution_id"] == "exec-1"
    assert item["step_index"] == 3
    assert item["sequence"] == 41
    assert item["created_at"] == "2026-03-01T12:30:15.123456+00:00"
    assert item["metadata"]["chain_name"] == "helper"
    assert item["agent_id"] == "helper"
    assert item["resource_type"] == "agent"
    assert item["chain_id"] is None
    orjson.dumps(item)  # plain JSON, no NaN


def test_own_checkpoint_round_trips_losslessly() -> None:
    """Every field, every codec type, a custom status and a non-object payload come back exactly."""
    for cp in (
        full_checkpoint(),
        full_checkpoint(status="paused-by-operator", state=[1, (2, 3)], namespace=""),
    ):
        item = orjson.loads(orjson.dumps(checkpoint_to_wire(cp)))  # as the plane stores it
        back = checkpoint_from_wire(item)
        assert_same(cp.state, back.state, "state")
        assert_same(cp.node_output, back.node_output, "node_output")
        assert_same(cp.metadata, back.metadata, "metadata")
        # rich_state's exception comes back as a CheckpointedException (assert_same checks it).
        assert back.evolve(state=cp.state) == cp.evolve(seq=None)


def test_status_outside_the_wire_vocabulary_is_sent_as_completed() -> None:
    """The wire only knows completed/interrupted/failed; the extension keeps the real one."""
    item = checkpoint_to_wire(full_checkpoint(status="paused-by-operator"))
    assert item["status"] == "completed"
    assert item["metadata"]["durability"]["status"] == "paused-by-operator"
    assert checkpoint_to_wire(full_checkpoint(status="failed"))["status"] == "failed"


def test_non_object_values_are_wrapped_and_named() -> None:
    """A state that is not a JSON object rides as {"value": …}, and the extension names it."""
    item = checkpoint_to_wire(full_checkpoint(state=[1, 2], node_input="text"))
    assert item["state_snapshot"] == {"value": [1, 2]}
    assert item["metadata"]["node_input"] == {"value": "text"}
    # A tuple is the codec's envelope, itself an object: it needs no wrapping.
    assert item["metadata"]["node_output"]["$t"] == "tup"
    assert item["metadata"]["durability"]["wrapped"] == ["state", "node_input"]


@pytest.mark.parametrize(
    ("path", "node", "expected"),
    [
        (None, "step-1", "chain"),
        (None, "turn:0", "agent"),
        ("agent:helper/tool:lookup", "x", "agent"),
        ("swarm:desk/agent:triage/tool:handoff", "turn:1", "swarm"),
        ("swarm:desk", "handoff:1", "swarm"),
        ("supervisor:lead/worker:researcher", "turn:0", "supervisor"),
    ],
)
def test_resource_type_is_read_from_the_root_of_agent_path(
    path: str | None, node: str, expected: str
) -> None:
    """Every row of a swarm or supervisor run reports the run's topology, whatever its depth."""
    assert resource_type(path, node) == expected


def test_agent_id_is_the_registered_plane_id_else_the_name() -> None:
    """agent_id is resolved when the batch is mapped: the registered id, else the name; chains send chain_id."""
    row = _encoded(full_checkpoint())
    assert to_wire(row, agent_ids={"helper": "uuid-1"}).item["agent_id"] == "uuid-1"
    assert to_wire(row, agent_ids={}).item["agent_id"] == "helper"
    chain = to_wire(_encoded(full_checkpoint(agent_path=None, node_id="fetch", runner="etl"))).item
    assert chain["resource_type"] == "chain"
    assert chain["chain_id"] == "etl"
    assert chain["agent_id"] is None


def test_foreign_item_maps_like_fastaiagents_restore() -> None:
    """An item without the extension: runner from metadata.chain_name, else agent_id; payloads as sent."""
    item = {
        "checkpoint_id": "c",
        "execution_id": "e",
        "resource_type": "agent",
        "agent_id": "a9e0c0de-uuid",
        "node_id": "turn:1",
        "step_index": 1,
        "step_type": "llm_call",
        "status": "completed",
        "state_snapshot": {
            "messages": [{"role": "user", "content": "hi"}],
            "$t": "not an envelope",
        },
        "metadata": {
            "chain_name": "helper",
            "agent_path": "agent:helper",
            "iteration_counters": {"x": 1},
        },
        "created_at": "2026-12-02T13:54:46.965664+00:00",
    }
    cp = checkpoint_from_wire(item)
    assert not is_durability_item(item)
    assert cp.runner == "helper"
    assert cp.agent_id == "a9e0c0de-uuid"
    assert cp.step == 1
    assert cp.state == item["state_snapshot"]
    assert cp.iteration_counters == {"x": 1}
    assert cp.created_at == datetime(2026, 12, 2, 13, 54, 46, 965664, tzinfo=UTC)
    del item["metadata"]
    assert checkpoint_from_wire(item).runner == "a9e0c0de-uuid"
    with pytest.raises(RestoreError, match="not a wire item"):
        checkpoint_from_wire({"no": "ids"})


class XorEncoder:
    """A toy customer-held-key encoder: the plane only ever sees ciphertext."""

    name = "xor-demo"

    def __init__(self, key: int) -> None:
        self.key = key

    def encode(self, state: dict[str, Any]) -> dict[str, Any]:
        data = bytes(b ^ self.key for b in orjson.dumps(state))
        return {"ciphertext": base64.b64encode(data).decode(), "key_id": "k1"}

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = bytes(b ^ self.key for b in base64.b64decode(payload["ciphertext"]))
        decoded: dict[str, Any] = orjson.loads(data)
        return decoded


def test_payload_encoder_seam() -> None:
    """A payload encoder replaces the state on the wire; restore needs the same encoder by name."""
    cp = full_checkpoint(state={"secret": "card 4111", "when": WHEN})
    item = checkpoint_to_wire(cp, encoder=XorEncoder(7))
    assert "4111" not in orjson.dumps(item["state_snapshot"]).decode()
    assert item["metadata"]["durability"]["payload"] == "xor-demo"
    assert checkpoint_from_wire(item, encoders={"xor-demo": XorEncoder(7)}) == cp.evolve(seq=None)
    with pytest.raises(RestoreError, match="xor-demo"):
        checkpoint_from_wire(item)


def test_stripped_run_end_keeps_the_outcome_only() -> None:
    """The stand-in for a refused run end keeps its id and outcome keys, and says it was stripped."""
    end = full_checkpoint(
        step_type="run_end",
        status="failed",
        node_id="run_end",
        state={"blob": "x" * 5000, "run_status": "failed", "run_error": "ValueError: boom"},
    )
    wire = to_wire(_encoded(end), stripped="HTTP 413 from /checkpoints/ingest: too big")
    assert wire.item["checkpoint_id"] == "cp-1"
    assert wire.item["step_type"] == "run_end"
    assert wire.item["state_snapshot"] == {"run_status": "failed", "run_error": "ValueError: boom"}
    assert wire.item["metadata"]["node_input"] == {}
    assert len(wire.body) < 2000
    assert was_stripped(wire.item) == "HTTP 413 from /checkpoints/ingest: too big"
    assert was_stripped(checkpoint_to_wire(end)) is None


def test_local_caps_name_the_offence() -> None:
    """A row over an announced cap is named before sending (state bytes, step_type length)."""
    limits = PlaneLimits(state_bytes=100, step_type_chars=40)
    big = to_wire(_encoded(full_checkpoint(state={"x": "y" * 200})))
    assert "over the plane's 100-byte cap" in (limits.violation(big) or "")
    long_step = to_wire(_encoded(full_checkpoint(state={}, step_type="s" * 41)))
    assert (
        limits.violation(long_step)
        == "step_type is 41 characters, over the plane's 40-character limit"
    )
    assert PlaneLimits.announced({"state_bytes": 5, "step_type_chars": "x"}) == PlaneLimits(
        state_bytes=5
    )


def _encoded(cp: Checkpoint) -> EncodedCheckpoint:
    row = EncodedCheckpoint.encode(cp)
    row.seq = cp.seq or 1
    return row
