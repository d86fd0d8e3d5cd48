"""A griffe extension for the API reference: the docstrings' reStructuredText as Markdown.

The library's docstrings are written for ``help()`` and Sphinx habits: roles that name other
objects (``:class:`~durability.errors.LeaseHeld```), simple tables framed by ``====`` lines,
section titles underlined with ``====`` and literal blocks introduced by ``::``. mkdocstrings
reads Markdown, where those would show as raw text; this rewrites each docstring as it loads:

* a role becomes inline code of the name a reader sees (the last dotted part after ``~``);
* a simple table becomes a Markdown table (a row whose first cell is empty continues the row
  above);
* a section title becomes a bold line, and ``text::`` becomes ``text:`` (the indented block
  after it is already a Markdown code block).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
BORDER = re.compile(r"^=+(?: +=+)+ *$")
UNDERLINE = re.compile(r"^(=+|-+)$")


def roles(text: str) -> str:
    """``text`` with every Sphinx cross-reference role replaced by inline code."""

    def code(match: re.Match[str]) -> str:
        tilde, target = match.groups()
        return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"

    return ROLE.sub(code, text)


def _columns(border: str) -> list[tuple[int, int | None]]:
    """Where each column of a simple table starts and ends, from its ``====`` border."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"=+", border)]
    return [(start, None if i == len(spans) - 1 else end) for i, (start, end) in enumerate(spans)]


def _cells(line: str, columns: list[tuple[int, int | None]]) -> list[str]:
    starts = [start for start, _ in columns] + [None]
    return [line[starts[i] : starts[i + 1]].strip() for i in range(len(columns))]


def _table(lines: list[str], columns: list[tuple[int, int | None]]) -> list[str]:
    """A simple table's rows (between its borders) as Markdown table lines."""
    rows: list[list[str]] = []
    header: list[str] | None = None
    for line in lines:
        if BORDER.match(line):
            header, rows = (rows[0] if rows else None), []
            continue
        if not line.strip():
            continue
        cells = _cells(line, columns)
        if rows and not cells[0]:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    if header is None:
        header, rows = [""] * len(columns), rows
    out = [header, ["---"] * len(columns), *rows]
    return ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in out]


def markdown(text: str) -> str:
    """A docstring's reStructuredText constructs rewritten as Markdown."""
    lines = roles(text).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if BORDER.match(line):
            columns = _columns(line)
            end, borders = i + 1, 1
            while end < len(lines) and borders < 3:
                borders += bool(BORDER.match(lines[end]))
                end += 1
                after = lines[end] if end < len(lines) else ""
                if borders == 2 and BORDER.match(lines[end - 1]) and not after.strip():
                    break  # a table without a header row ends at its second border
            out += ["", *_table(lines[i + 1 : end - 1], columns), ""]
            i = end
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and UNDERLINE.match(following) and len(following) >= len(line.strip()):
            out += [f"**{line.strip()}**", ""]
            i += 2
            continue
        out.append(line[:-1] if line.endswith("::") and not line.endswith(" ::") else line)
        i += 1
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
