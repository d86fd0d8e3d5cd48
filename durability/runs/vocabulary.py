"""The runner's vocabulary: node names, failure reasons and the states of a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durability.runs.execution import RunContext

#: ``node_id`` of a run's first row, and the position before the first step.
START_NODE = "__start__"


#: ``node_id`` of a run end (fastaiagent's marker).
RUN_END_NODE = "run_end"


#: Why a failed run ended.
REASON_ERROR = "error"


REASON_CANCELLED = "cancelled"


REASON_ABORTED = "aborted"


REASON_TIMEOUT = "timeout"


#: A run waiting on an ask (its park is pending).
PARKED = "parked"


#: A run stopped between two steps in step mode (``max_steps``): no run end, no park, no lease;
#: it continues on the next resume or step.
PAUSED = "paused"


#: Longest error text a run end keeps.
MAX_ERROR_TEXT = 4000


StepFn = Callable[[Any, "RunContext"], Any]


class _NoValue:
    def __repr__(self) -> str:
        return "NO_VALUE"


#: "No resume value given" (``None`` is a value).
NO_VALUE: Any = _NoValue()
