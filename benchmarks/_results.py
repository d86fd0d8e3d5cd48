"""Write one benchmark's section into benchmarks/RESULTS.md, leaving the others alone."""

from __future__ import annotations

import io
import pstats
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(heading: str, section: str) -> None:
    """Replace (or append) the section that starts with the line ``heading``."""
    current = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    lines = current.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        updated = current.rstrip("\n") + "\n\n" + section
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        tail = "".join(lines[end:])
        updated = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    RESULTS.write_text(updated)


def publish(heading: str, section: str, *, write: bool) -> None:
    """Print the section, and write it into RESULTS.md when ``write`` (no ``--no-write``)."""
    print(section)
    if write:
        write_section(heading, section)


def top_functions(profile: Any, count: int) -> str:
    """The ``count`` functions of a ``cProfile.Profile`` with the most own time, as RESULTS.md shows them."""
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(count)
    keep = [
        line
        for line in out.getvalue().splitlines()
        if line.strip() and ("{" in line or "(" in line or "ncalls" in line)
    ]
    return "\n".join(keep[: count + 2])
