"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

* The decision records index lists every ``docs/decisions/NNNN-*.md`` that exists: the page
  holds the marker ``<!-- decision-records -->``, replaced at build time by a table of each
  record's number and title (its first heading), so a developer adding a record only adds
  its file.
* A link to ``benchmarks/RESULTS.md`` (outside the docs folder, where records point for
  figures) is sent to the site's Benchmarks page, which includes that file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- decision-records -->"
RECORD = re.compile(r"^(\d{4})-[a-z0-9-]+\.md$")
RESULTS_LINK = re.compile(r"\]\((?:\.\./)*benchmarks/RESULTS\.md(#[^)]*)?\)")


def records(folder: Path) -> list[tuple[str, str, str]]:
    """``(number, title, file name)`` of every decision record in ``folder``, by number."""
    found = []
    for path in sorted(folder.iterdir()):
        match = RECORD.match(path.name)
        if match is None:
            continue
        heading = next(
            (line for line in path.read_text().splitlines() if line.startswith("# ")), path.stem
        )
        title = re.sub(r"^#\s*(\d{4}[.:]?\s*)?", "", heading).strip()
        found.append((match.group(1), title, path.name))
    return found


def records_table(folder: Path) -> str:
    """The index's table of records, as markdown."""
    rows = [f"| [{n}]({name}) | {title} |" for n, title, name in records(folder)]
    return "\n".join(["| record | decision |", "| --- | --- |", *rows])


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the decisions index and point benchmark links at the Benchmarks page."""
    source = Path(page.file.abs_src_path)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, records_table(source.parent))
    depth = page.file.src_uri.count("/")
    target = "../" * depth + "benchmarks.md"
    return RESULTS_LINK.sub(lambda m: f"]({target}{m.group(1) or ''})", markdown)
