"""A table whose selected row drives the views that act on it: :class:`RowPicker`.

The rows are a frame the notebook already holds (the threads, the largest ones, the threads a
restore would bring back); the view pages, sorts and searches it with
:func:`durability.tables.page` and shows a page as a list of fixed-width rows
(:func:`durability.tables.text_table`): clicking a row selects it, and every listener added
with :meth:`RowPicker.on_select` is called with that row (:meth:`RowPicker.drives` picks its
thread in the explorer or the restore panel). ipywidgets' own list is the
selection, so it works wherever the other views do (no widget extension to install), and only
the page shown is sent to the browser.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ipywidgets as w
import pandas as pd

from durability import tables
from durability.widgets._parts import button, classed

#: Rows a picker shows at once.
PICKER_ROWS = 12

#: The list's rows as the table they are: one monospace line each, the header above in the same.
_STYLE = (
    "<style>.durability-rows-list select, .durability-rows-header pre "
    "{font-family: var(--jp-code-font-family, monospace); font-size: 12px; white-space: pre;}"
    ".durability-rows-header pre {margin: 0 0 0 4px;}</style>"
)

Listener = Callable[[pd.Series], object]


class Picks(Protocol):
    """A view that shows or acts on one thread: the explorer, the restore panel."""

    def pick(self, thread_id: str) -> None: ...


class RowPicker:
    """Pick one row of ``frame``: ``.selected`` is it (a row of the frame, with its values).

    Controls (attributes, with CSS classes ``durability-rows-…`` for browser tests): ``.search``
    (rows whose cells, as shown, contain the text), ``.sort`` (a column) and ``.descending``,
    ``.previous`` and ``.next`` (pages of ``rows``), ``.list`` (the page's rows: selecting one
    sets ``.selected`` and calls the listeners). ``columns`` limits the columns shown; ``key``
    is the column listeners usually want (``thread_id``). ``.page`` is the
    :class:`~durability.tables.Page` shown.
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        *,
        columns: Sequence[str] | None = None,
        sort: str | None = None,
        descending: bool = True,
        rows: int = PICKER_ROWS,
        key: str = "thread_id",
    ) -> None:
        self.frame = frame.reset_index(drop=True)
        self.key = key
        self.size = rows
        self.shown = tables.ordered(self.frame[list(columns)] if columns else self.frame)
        self._text = tables.search_text(self.shown)
        self._listeners: list[Listener] = []
        self.selected: pd.Series | None = None
        self.page = tables.page(self.shown, size=rows)
        self._controls(sort, descending)
        self.show(0)

    def _controls(self, sort: str | None, descending: bool) -> None:
        self.search = classed(
            w.Text(description="search", placeholder="text in any cell", continuous_update=False),
            "durability-rows-search",
        )
        names = [str(c) for c in self.shown.columns]
        self.sort = classed(
            w.Dropdown(options=names, value=sort if sort in names else None, description="sort by"),
            "durability-rows-sort",
        )
        self.descending = classed(
            w.Checkbox(value=descending, description="descending", indent=False),
            "durability-rows-descending",
        )
        self.previous = button("◀", "durability-rows-previous", layout=w.Layout(width="40px"))
        self.next = button("▶", "durability-rows-next", layout=w.Layout(width="40px"))
        self.counter = classed(w.HTML(), "durability-rows-counter")
        self.header = classed(w.HTML(), "durability-rows-header")
        self.list = classed(
            w.Select(options=[], rows=self.size, layout=w.Layout(width="100%")),
            "durability-rows-list",
        )
        for control in (self.search, self.sort, self.descending):
            control.observe(lambda _: self.show(0), names="value")
        self.previous.on_click(lambda _: self.show(self.page.number - 1))
        self.next.on_click(lambda _: self.show(self.page.number + 1))
        self.list.observe(lambda change: self._select(change["new"]), names="value")
        bar = [self.search, self.sort, self.descending, self.previous, self.next, self.counter]
        self.widget = classed(
            w.VBox([w.HTML(_STYLE), w.HBox(bar), self.header, self.list]), "durability-rows"
        )

    def on_select(self, listener: Listener) -> None:
        """Call ``listener(row)`` each time a row is selected."""
        self._listeners.append(listener)

    def drives(self, *views: Picks) -> None:
        """Each selected row's ``key`` (its thread id) is picked in each of ``views``."""
        for view in views:
            self.on_select(self._picker_for(view))

    def _picker_for(self, view: Picks) -> Listener:
        def pick(row: pd.Series) -> None:
            view.pick(str(row[self.key]))

        return pick

    def show(self, number: int) -> None:
        """Show page ``number`` of the rows the search matches, in the chosen order."""
        self.page = tables.page(
            self.shown,
            text=self._text,
            search=self.search.value,
            sort=self.sort.value,
            descending=self.descending.value,
            number=number,
            size=self.size,
        )
        header, lines = tables.text_table(self.page.rows)
        self.header.value = f"<pre>{html.escape(header)}</pre>"
        self.list.value = None  # a new page selects nothing (the list would pick its first row)
        self.list.options = list(zip(lines, self.page.rows.index.tolist(), strict=True))
        self.previous.disabled = self.page.number == 0
        self.next.disabled = self.page.number >= self.page.pages - 1
        self.counter.value = (
            f"<span>page {self.page.number + 1} of {self.page.pages} · "
            f"{self.page.matches:,} of {len(self.shown):,} rows</span>"
        )

    def select(self, position: int) -> None:
        """Select the ``position``-th row of the page shown (what a click on it does)."""
        self.list.value = self.page.rows.index[position]

    def _select(self, index: Any) -> None:
        if index is None:
            return
        self.selected = self.frame.loc[index]
        for listener in self._listeners:
            listener(self.selected)


__all__ = ["PICKER_ROWS", "RowPicker"]
