"""durability.tables' pages of rows: what a table view (the widgets' RowPicker) shows."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd

from durability import tables


def _threads() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "size_bytes": [2048, 10, None, 5 * 1024 * 1024],
            "thread_id": ["chat-0001", "support-session-1", "chat-0002", "f" * 36],
            "newest_at": pd.to_datetime(
                [datetime(2026, 11, d, tzinfo=UTC) for d in (3, 1, 4, 2)], utc=True
            ),
            "owner": ["assistants", "support", "assistants", None],
        }
    )


def test_a_page_sorts_by_value_with_missing_values_last() -> None:
    frame = _threads()
    largest = tables.page(frame, sort="size_bytes", descending=True, size=10)
    assert largest.rows["thread_id"].tolist() == [
        "f" * 36,
        "chat-0001",
        "support-session-1",
        "chat-0002",
    ]
    smallest = tables.page(frame, sort="size_bytes", size=10)
    assert smallest.rows["thread_id"].tolist()[:3] == ["support-session-1", "chat-0001", "f" * 36]
    assert smallest.rows["thread_id"].tolist()[-1] == "chat-0002", "missing sizes come last"
    newest = tables.page(frame, sort="newest_at", descending=True, size=10)
    assert newest.rows["thread_id"].tolist()[0] == "chat-0002"
    assert largest.rows.index.tolist() == [3, 0, 1, 2], "the frame's own index is kept"


def test_pages_count_and_clamp() -> None:
    frame = pd.DataFrame({"thread_id": [f"t-{n:02d}" for n in range(25)]})
    first = tables.page(frame, size=10)
    assert (first.number, first.pages, first.matches, len(first.rows)) == (0, 3, 25, 10)
    last = tables.page(frame, number=2, size=10)
    assert last.rows["thread_id"].tolist() == [f"t-{n:02d}" for n in range(20, 25)]
    assert tables.page(frame, number=9, size=10).number == 2, "past the last page: the last"
    assert tables.page(frame, number=-1, size=10).number == 0
    empty = tables.page(frame.iloc[:0], size=10)
    assert (empty.number, empty.pages, empty.matches) == (0, 1, 0)


def test_search_looks_in_the_cells_as_people_read_them() -> None:
    frame = _threads()
    assert tables.page(frame, search="CHAT-").rows["thread_id"].tolist() == [
        "chat-0001",
        "chat-0002",
    ]
    assert tables.page(frame, search="5.0 mib").rows["thread_id"].tolist() == ["f" * 36]
    assert tables.page(frame, search="2026-11-01").rows["owner"].tolist() == ["support"]
    assert tables.page(frame, search="nobody").matches == 0
    text = tables.search_text(frame)
    assert tables.page(frame, text=text, search="support").matches == 1
    assert tables.page(frame, search="   ").matches == 4, "a blank search keeps every row"


def test_text_table_lines_up_people_units_and_cuts_ids() -> None:
    header, lines = tables.text_table(_threads())
    assert header.split() == ["thread_id", "owner", "size_bytes", "newest_at"]
    assert len(lines) == 4
    assert lines[0].split()[0] == "chat-0001"
    assert "2.0 KiB" in lines[0]
    assert lines[3].startswith("f" * 15 + "… "), lines[3]
    assert lines[1].split()[0] == "support-session…"
    assert "5.0 MiB" in lines[3]
    width = header.index("newest_at")
    assert all(line[width : width + 10].startswith("2026-11-0") for line in lines)


def test_an_empty_frame_is_one_empty_page_with_its_header() -> None:
    empty = _threads().iloc[:0]
    found = tables.page(empty, search="chat", sort="size_bytes")
    assert (found.matches, found.number, found.pages) == (0, 0, 1)
    header, lines = tables.text_table(empty)
    assert header.split() == ["thread_id", "owner", "size_bytes", "newest_at"]
    assert lines == []
