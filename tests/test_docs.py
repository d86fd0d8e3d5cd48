"""The documentation cannot rot: the site builds strictly and the examples run.

* ``mkdocs build --strict`` builds the site (API reference from the docstrings, CLI reference
  from click) into a temp folder: a broken link, a missing page or an unreadable docstring
  fails it.
* Every fenced ```` ```python ```` block of the README, the quickstart, the guides and the
  format, configuration and error pages runs, page by page: the blocks of one page share a
  namespace, in a fresh Python process whose working folder is a temp folder. A block may be
  skipped by an HTML comment on the line before it, ``<!-- docs-test: skip REASON -->``, when
  it needs something no test can provide (a third-party scheduler, a process that runs
  forever); the reason is required.
* Examples name their servers as a reader would (``postgresql+psycopg://…@localhost/app``,
  ``redis://localhost:6379/0``); the test swaps each such URL for an isolated location on the
  test servers (a schema, a key prefix), failing in CI when a server is missing. Pages about
  the plane get a real plane on loopback through ``DURABILITY_PLANE_URL`` and
  ``DURABILITY_PLANE_API_KEY``; the analysis guide gets the demo fleet at
  ``durability-out/demo.db``; the foreign-stores guide gets a store the real fastaiagent SDK
  wrote at ``.fastaiagent/local.db``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_target

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
DOCS = ROOT / "docs"

#: The pages whose examples are run.
PAGES = sorted(
    [
        ROOT / "README.md",
        DOCS / "index.md",
        DOCS / "quickstart.md",
        DOCS / "concepts.md",
        DOCS / "configuration.md",
        DOCS / "errors.md",
        *DOCS.glob("guides/*.md"),
        *DOCS.glob("formats/*.md"),
    ]
)

FENCE = re.compile(r"^```python\s*$")
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\s+(?P<reason>\S.*?)\s*-->$")
POSTGRES = re.compile(r"""(["'])postgresql\+psycopg://[^"']*\1""")
REDIS = re.compile(r"""(["'])rediss?://[^"']*\1""")

#: Runs a page's blocks in the ``__main__`` module, as a script would (so a class an example
#: defines is importable by its path); a failure names the page and line.
DRIVER = """
import json, sys, __main__
for origin, line, code in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + code, origin, "exec"), __main__.__dict__)
"""


@dataclass(frozen=True)
class Block:
    """One fenced python block: where it starts (the first code line) and its code."""

    page: Path
    line: int
    code: str
    skip: str | None


def blocks_of(page: Path) -> list[Block]:
    """The python blocks of a page, with the skip reason of those marked to skip."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        marked = SKIP.match(before)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 2, code, marked.group("reason") if marked else None))
        i = end + 1
    return found


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


# ---------------------------------------------------------------------------- the site


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds: every page, link, docstring and command renders."""
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f} s")
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("sweep", "restore", "outbox forget", "serve-ops", "plane keys create"):
        assert f"durability {command}" in cli, command
    api = (site / "reference" / "api" / "stores" / "index.html").read_text()
    assert "put_many" in api
    assert "record_run_start" in api  # the ledger capability
    assert "check_can_park" in api  # the parks capability


def test_every_decision_record_is_short_and_in_sections() -> None:
    """Decision records are numbered once each, ≤ 40 lines, with Context, Decision and
    Consequences sections."""
    records = sorted((DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert len(records) >= 20
    numbers = [r.name[:4] for r in records]
    assert len(numbers) == len(set(numbers)), f"a number is used twice: {numbers}"
    for record in records:
        text = record.read_text()
        assert len(text.splitlines()) <= 40, f"{record.name} is longer than 40 lines"
        for section in ("## Context", "## Decision", "## Consequences"):
            assert section in text, f"{record.name} has no {section!r}"


def test_skips_are_few_and_give_a_reason() -> None:
    """Every skip marker is read as one (a typo would run the block) and says why."""
    skipped = [b for page in PAGES for b in blocks_of(page) if b.skip is not None]
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.lstrip().startswith("<!--") and "docs-test" in line:
                assert SKIP.match(line.strip()), f"{_rel(page)}:{number}: unreadable marker"
    assert len(skipped) <= 3, [f"{_rel(b.page)}:{b.line}" for b in skipped]


# ---------------------------------------------------------------------------- the examples


@contextlib.contextmanager
def _server_urls(code: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Isolated URLs on the test servers for the servers ``code`` names."""
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for name, pattern in (("postgres", POSTGRES), ("redis", REDIS)):
            if pattern.search(code):
                target = stack.enter_context(contextlib.contextmanager(make_target)(name, tmp_path))
                urls[name] = target.url
        yield urls


def _fastaiagent_store(cwd: Path) -> None:
    """``.fastaiagent/local.db`` as the real fastaiagent SDK writes it."""
    db = cwd / ".fastaiagent" / "local.db"
    db.parent.mkdir()
    subprocess.run(
        [sys.executable, str(HERE / "fastaiagent_runs.py"), "sqlite", str(db)],
        check=True,
        capture_output=True,
        cwd=cwd,
    )


def _demo_store(cwd: Path, demo_url: str) -> None:
    """``durability-out/demo.db``: a copy of the demo fleet `durability demo` builds."""
    (cwd / "durability-out").mkdir()
    source = sqlite3.connect(demo_url.removeprefix("sqlite:///"))
    copy = sqlite3.connect(cwd / "durability-out" / "demo.db")
    with source, copy:
        source.backup(copy)
    source.close()
    copy.close()


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks_of(p)], ids=[_rel(p) for p in PAGES if blocks_of(p)]
)
def test_the_examples_of_a_page_run(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The page's python blocks run in order, in one fresh process, without an error."""
    blocks = [b for b in blocks_of(page) if b.skip is None]
    code = "".join(b.code for b in blocks)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABILITY_")}
    env.update({"MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)})
    cwd = tmp_path / "work"
    cwd.mkdir()
    if "DURABILITY_PLANE_URL" in code:
        plane = request.getfixturevalue("plane")
        env.update({"DURABILITY_PLANE_URL": plane.url, "DURABILITY_PLANE_API_KEY": plane.key})
    if "durability-out/demo.db" in code:
        _demo_store(cwd, request.getfixturevalue("replicated_demo"))
    if ".fastaiagent/local.db" in code:
        _fastaiagent_store(cwd)
    with _server_urls(code, tmp_path) as urls:
        payload = []
        for block in blocks:
            text = POSTGRES.sub(lambda _: repr(urls["postgres"]), block.code)
            text = REDIS.sub(lambda _: repr(urls["redis"]), text)
            payload.append((_rel(block.page), block.line, text))
        out = subprocess.run(
            [sys.executable, "-c", DRIVER],
            input=json.dumps(payload),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert out.returncode == 0, f"an example of {_rel(page)} failed:\n{out.stderr[-6000:]}"
