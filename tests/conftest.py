"""Shared fixtures: a store target per provider, isolated per test.

Postgres and Redis join when their servers answer on loopback; in CI (``CI=true``) a missing
server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from durability.testing import StoreTarget

IN_CI = os.environ.get("CI", "").lower() == "true"

#: The replication tests' plane on loopback (fixtures ``served_plane`` and ``plane``).
pytest_plugins = ["plane_support"]

PROVIDERS = ["memory", "sqlite"]


def need_service(name: str, reason: str) -> None:
    """Skip (on a laptop) or fail (in CI) when a server the test needs is missing."""
    if IN_CI:
        pytest.fail(f"{name} is required in CI: {reason}")
    pytest.skip(f"{name} not available: {reason}")


def make_target(provider: str, tmp_path: Path) -> Iterator[StoreTarget]:
    """An isolated store location for ``provider``; cleaned up afterwards."""
    if provider == "memory":
        yield StoreTarget(f"memory://test-{uuid.uuid4().hex}")
    elif provider == "sqlite":
        yield StoreTarget(f"sqlite:///{tmp_path / 'store.db'}", {"single_worker": True}, cross_process=True)
    elif provider == "sqlite-plain":
        yield StoreTarget(f"sqlite:///{tmp_path / 'plain.db'}", cross_process=True)
    else:  # pragma: no cover - guarded by PROVIDERS
        raise ValueError(provider)


@pytest.fixture(params=[*PROVIDERS, "sqlite-plain"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """A fresh store location on each provider."""
    yield from make_target(request.param, tmp_path)
