"""The conformance suite of durability.testing, on every provider."""

from __future__ import annotations

import pytest

from durability.testing import CHECKS, StoreTarget, not_applicable


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_conformance(check, target: StoreTarget) -> None:
    """Each provider passes each check of the shared suite that applies to it."""
    reason = not_applicable(check, target)
    if reason is not None:
        pytest.skip(reason)
    check(target)
