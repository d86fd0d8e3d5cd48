"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on every provider."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)

from durability.langgraph import DurabilitySaver
from durability.testing import StoreTarget

SPECS: list[Callable[[Any], Awaitable[None]]] = [
    *test_put.ALL_PUT_TESTS,
    *test_put_writes.ALL_PUT_WRITES_TESTS,
    *test_get_tuple.ALL_GET_TUPLE_TESTS,
    *test_list.ALL_LIST_TESTS,
    *test_delete_thread.ALL_DELETE_THREAD_TESTS,
    *test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS,
    *test_copy_thread.ALL_COPY_THREAD_TESTS,
    *test_prune.ALL_PRUNE_TESTS,
]


async def test_every_capability_is_detected_and_green(target: StoreTarget) -> None:
    """validate() detects all eight capabilities (base and extended) and every test passes."""

    @checkpointer_test(name=f"DurabilitySaver-{uuid.uuid4().hex}")
    async def saver() -> AsyncIterator[DurabilitySaver]:
        store = target.open()
        yield DurabilitySaver(store)
        store.close()

    report = await validate(saver)
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    for name, result in report.results.items():
        assert result.detected, f"{name} not detected"
        assert result.passed, (name, result.failures)
        assert result.tests_failed == 0, (name, result.failures)
    assert sum(r.tests_passed for r in report.results.values()) == len(SPECS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.__name__.removeprefix("test_"))
async def test_spec_on_a_fresh_saver(
    spec: Callable[[Any], Awaitable[None]], target: StoreTarget
) -> None:
    """Each spec test passes on a saver over a store that has never been used."""
    with target.open() as store:
        await spec(DurabilitySaver(store))
