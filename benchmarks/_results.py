"""Write one benchmark's section into benchmarks/RESULTS.md, leaving the others alone."""

from __future__ import annotations

from pathlib import Path

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
