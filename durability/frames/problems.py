"""The doctor's findings as a frame: :func:`problems`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability.frames.columns import categories, empty, ints, strings

if TYPE_CHECKING:
    import pandas as pd

    from durability.stores.base import Store


def problems(store: Store, now: datetime | None = None, **options: Any) -> pd.DataFrame:
    """One row per problem ``durability doctor`` finds (``COLUMNS["problems"]``), worst first.

    ``severity`` is ``error``, ``warning`` or ``info``; ``rows`` how many rows the problem
    involves; ``fix`` the command that repairs it (``<NA>`` where none can). ``options`` go to
    :func:`durability.doctor.diagnose` (``grace``, ``overdue``). An empty frame: the store is
    whole.
    """
    import pandas as pd

    from durability.doctor import SEVERITIES, diagnose

    found = diagnose(store, now=now, **options).problems
    if not found:
        return empty("problems")
    frame = pd.DataFrame(
        {
            "check": strings([p.check for p in found]),
            "severity": categories([p.severity for p in found]),
            "thread_id": strings([p.thread_id for p in found]),
            "rows": ints([p.rows for p in found]),
            "detail": strings([p.detail for p in found]),
            "fix": strings([p.fix for p in found]),
        }
    )
    frame["severity"] = frame["severity"].cat.set_categories(list(SEVERITIES))
    return frame
