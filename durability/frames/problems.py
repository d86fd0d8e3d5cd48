"""The doctor's findings as a frame: :func:`problems`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from durability.frames.columns import categories, empty, ints, strings

if TYPE_CHECKING:
    import pandas as pd

    from durability.doctor import Problem
    from durability.stores.base import Store


def problems(store: Store, now: datetime | None = None, **options: Any) -> pd.DataFrame:
    """One row per problem ``durability doctor`` finds (``COLUMNS["problems"]``), worst first.

    ``severity`` is ``error``, ``warning`` or ``info``; ``rows`` how many rows the problem
    involves; ``fix`` the command that repairs it (``<NA>`` where none can). ``options`` go to
    :func:`durability.doctor.diagnose` (``grace``, ``overdue``, and for a large store
    ``info_limit``, ``sample``, ``thread_count``). An empty frame: the store is whole.

    ``attrs["counts"]``: how many findings of each severity, those counted but not listed
    included; ``attrs["counted"]``: the ``info`` checks whose findings ``info_limit`` cut
    short, each with how many it found in all (the frame lists the first ``info_limit``);
    ``attrs["sampled"]``: the checks that read a sample, each ``{"read": n, "of": in the
    store, "what": "threads"}`` (or ``"synced records"``). Both empty when the store was
    listed and read whole (the default).
    """
    from durability.doctor import SEVERITIES, diagnose

    diagnosis = diagnose(store, now=now, **options)
    found = diagnosis.problems
    frame = _frame(found) if found else empty("problems")
    frame["severity"] = frame["severity"].cat.set_categories(list(SEVERITIES))
    frame.attrs["counts"] = diagnosis.counts()
    frame.attrs["counted"] = dict(diagnosis.counted)
    frame.attrs["sampled"] = {
        check: {"read": read, "of": total, "what": what}
        for check, (read, total, what) in diagnosis.sampled.items()
    }
    return frame


def _frame(found: list[Problem]) -> pd.DataFrame:
    """The problems' documented columns."""
    import pandas as pd

    return pd.DataFrame(
        {
            "check": strings([p.check for p in found]),
            "severity": categories([p.severity for p in found]),
            "thread_id": strings([p.thread_id for p in found]),
            "rows": ints([p.rows for p in found]),
            "detail": strings([p.detail for p in found]),
            "fix": strings([p.fix for p in found]),
        }
    )
