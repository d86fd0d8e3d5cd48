"""A store of one's own: the minimal example implements the core primitives alone and passes
the core conformance checks (docs/examples/minimal_store.py)."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest

from durability.errors import CapabilityError, ConfigError, ParkRefused
from durability.model import Checkpoint
from durability.stores import PROVIDERS, register_provider
from durability.testing import CORE_CHECKS, StoreTarget, not_applicable

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "minimal_store.py"


def _minimal_store_class() -> type:
    spec = importlib.util.spec_from_file_location("minimal_store", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MinimalStore  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def scheme() -> str:
    name = "mini"
    if name not in PROVIDERS:
        register_provider(name, _minimal_store_class())
    return name


def test_the_example_is_small() -> None:
    """The example stays a readable size: the core contract is small."""
    assert len(EXAMPLE.read_text().splitlines()) < 200


@pytest.mark.parametrize("check", CORE_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_the_minimal_store_passes_the_core_checks(check, scheme: str) -> None:
    """Each core check passes on a store that implements only the core primitives."""
    target = StoreTarget(f"{scheme}://{uuid.uuid4().hex}")
    reason = not_applicable(check, target)
    if reason is not None:
        pytest.skip(reason)
    check(target)


def test_its_capabilities_are_visibly_absent_and_the_old_names_refuse_loudly(scheme: str) -> None:
    """No ledger, parks or outbox: the attributes are None, and the delegating names refuse."""
    store = StoreTarget(f"{scheme}://{uuid.uuid4().hex}").open()
    assert (store.ledger, store.parks, store.outbox) == (None, None, None)
    with pytest.raises(CapabilityError, match="keeps no thread ledger"):
        store.mark_finished("t")
    with pytest.raises(ParkRefused, match="cannot hold a parked run"):
        store.park(Checkpoint(thread_id="t"), deadline=store.clock())
    with pytest.raises(CapabilityError, match="keeps no outbox"):
        store.fetch_unsynced()
    assert store.unreplicated() == {}
    assert not store.replicates


def test_a_taken_scheme_is_refused(scheme: str) -> None:
    """Registering a scheme twice is refused, naming it."""
    with pytest.raises(ConfigError, match="'sqlite'"):
        register_provider("sqlite", _minimal_store_class())
