"""The static report's tables in a real browser: headless Debian Chromium (Playwright) opens
``index.html`` from disk, sorts a column, searches, and reads people's units and cut ids."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_browser import _need_browser

import durability
from durability.clock import FrozenClock
from durability.model import Checkpoint
from durability.report import write_report

pytestmark = [pytest.mark.browser]

T0 = datetime(2026, 11, 2, tzinfo=UTC)
#: Thread ids (long enough to be cut on the page) and the size of each one's state.
SIZES = {
    f"thread-{name}-0123456789": size
    for name, size in (("small", 10), ("big", 9000), ("mid", 3000))
}


def test_the_report_tables_sort_and_search_in_a_browser(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    clock = FrozenClock(T0)
    with durability.open(f"sqlite:///{tmp_path / 'report.db'}", clock=clock) as store:
        for day, (thread_id, size) in enumerate(SIZES.items()):
            clock.set(T0 + timedelta(days=day))
            store.put(Checkpoint(thread_id=thread_id, node_id="n", state={"text": "x" * size}))
        page_path = write_report(store, tmp_path / "report", now=T0 + timedelta(days=5))
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=_need_browser(), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(page_path.resolve().as_uri())
            table = page.locator(
                "div.dt-container", has=page.locator("caption", has_text="the largest threads")
            )
            table.locator("tbody tr").first.wait_for()

            def ids(expected: list[str] | None = None) -> list[str]:
                """The rows' full ids; given ``expected``, once the table shows them (a click
                or a search redraws the table after the event, not within it)."""
                deadline = time.monotonic() + 10
                while True:
                    found: list[str] = table.locator("tbody tr td:first-child span").evaluate_all(
                        "spans => spans.map(s => s.title)"
                    )
                    if expected is None or found == expected or time.monotonic() > deadline:
                        return found
                    time.sleep(0.05)

            assert ids() == [
                "thread-big-0123456789",
                "thread-mid-0123456789",
                "thread-small-0123456789",
            ]
            first_id = table.locator("tbody tr td:first-child").first.inner_text()
            assert first_id == "thread-b…", "ids show cut, the full id in the tooltip"
            sizes = table.locator("tbody tr td").all_inner_texts()
            assert any(text.endswith("KiB") for text in sizes), sizes
            header = table.locator("thead th", has_text="size_bytes")
            header.click()
            ascending = [
                "thread-small-0123456789",
                "thread-mid-0123456789",
                "thread-big-0123456789",
            ]
            assert ids(ascending) == ascending
            table.locator("thead th", has_text="size_bytes").click()
            descending = ascending[::-1]
            assert ids(descending)[0] == "thread-big-0123456789"
            table.locator("input[type=search]").fill("mid-0123")
            found = ids(["thread-mid-0123456789"])
            assert found == ["thread-mid-0123456789"], "the search finds the full id"
            assert errors == []
        finally:
            browser.close()
