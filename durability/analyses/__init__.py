"""The analyses operators ask for, each a frame with documented columns (:data:`COLUMNS`) and
a chart (:mod:`durability.analyses.charts`), on stores of any size.

=====================================  ==============================================================
function                               answers
=====================================  ==============================================================
:func:`bytes_by` (owner, runner, node)  where the bytes are, aggregated from header columns
:func:`bytes_by_state_key`             which top-level state keys hold them (a sample, said so)
:func:`largest_threads`,               the biggest threads and checkpoints
:func:`largest_checkpoints`
:func:`forecast`, :func:`crossing`     bytes and threads over the coming days under each policy,
                                       and the day the store crosses a size
:func:`readiness`,                     what a restore from the plane would bring back now, per
:func:`readiness_by_owner`             thread and summed by owner
:func:`readiness_summary`              the same per owner, and the worst threads, counted in the
                                       store (what a store of millions of threads shows)
:func:`backtest`                       the last days replayed against a proposed policy: storage
                                       per day, conversations cut between two turns
=====================================  ==============================================================

Each reads the store's header columns in chunks (no payload) and reduces them as they come;
only :func:`bytes_by_state_key` reads payloads, for its sample. Nothing changes the store.
"""

from __future__ import annotations

from durability._extras import needs_extra

# Every module of this package needs pandas and numpy, and is only imported after this file:
# the notebook extra is asked for here, once.
with needs_extra("durability.analyses"):  # the notebook extra
    import numpy  # noqa: F401
    import pandas  # noqa: F401

from durability.analyses.backtest import CAVEAT, Backtest, backtest
from durability.analyses.common import COLUMNS, RESTORABLE
from durability.analyses.forecast import crossing, fit, forecast
from durability.analyses.readiness import NEVER_CONNECTED, readiness, readiness_by_owner
from durability.analyses.readiness_summary import ReadinessSummary, readiness_summary
from durability.analyses.where import (
    bytes_by,
    bytes_by_state_key,
    largest_checkpoints,
    largest_threads,
)

__all__ = [
    "CAVEAT",
    "COLUMNS",
    "NEVER_CONNECTED",
    "RESTORABLE",
    "Backtest",
    "ReadinessSummary",
    "backtest",
    "bytes_by",
    "bytes_by_state_key",
    "crossing",
    "fit",
    "forecast",
    "largest_checkpoints",
    "largest_threads",
    "readiness",
    "readiness_by_owner",
    "readiness_summary",
]
