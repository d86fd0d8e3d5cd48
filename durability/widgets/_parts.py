"""The display helpers every view shares: showing a figure or a table, buttons, status lines."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import ipywidgets as w
import pandas as pd

from durability.errors import DurabilityError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: How many rows of a table a view shows (the whole frame stays on the attribute).
TABLE_ROWS = 500


# ---------------------------------------------------------------------------- display helpers


_Widget = TypeVar("_Widget", bound=w.DOMWidget)


def classed(widget: _Widget, css: str) -> _Widget:
    """``widget`` with the CSS class the browser tests and the lab's styles find it by."""
    widget.add_class(css)
    return widget


def show(output: w.Output, *items: Any) -> None:
    """Replace what ``output`` shows; a figure is shown as its PNG.

    Outside an IPython kernel an ``Output`` captures nothing, so nothing is rendered there.
    """
    from IPython import get_ipython
    from IPython.display import display
    from matplotlib.figure import Figure

    if get_ipython() is None:
        return
    with output:
        output.clear_output(wait=True)
        for item in items:
            display(png(item) if isinstance(item, Figure) else item)  # type: ignore[no-untyped-call]


def png(fig: Figure) -> Any:
    """A figure as a PNG display object: renders in any frontend, whatever the backend."""
    import io

    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96)
    return Image(data=buffer.getvalue(), format="png")  # type: ignore[no-untyped-call]


def table(frame: pd.DataFrame) -> Any:
    """A sortable, searchable table (:func:`durability.tables.html`) of the first
    :data:`TABLE_ROWS` rows, or a note when there are none."""
    from IPython.display import HTML

    from durability import tables

    if frame.empty:
        return HTML("<p><i>no rows</i></p>")  # type: ignore[no-untyped-call]
    return HTML(tables.html(frame.head(TABLE_ROWS)))  # type: ignore[no-untyped-call]


def message(text: str, *, error: bool = False) -> str:
    colour = "#b00020" if error else "#1b5e20"
    return f'<p style="color:{colour}">{html.escape(text)}</p>'


def button(description: str, css: str, **options: Any) -> w.Button:
    button = w.Button(description=description, **options)
    button.add_class(css)
    return button


def guarded(status: w.HTML, action: Callable[[], None]) -> None:
    """Run ``action``; a refusal of the library is shown in ``status`` instead of raised."""
    try:
        action()
    except (DurabilityError, ValueError) as exc:  # JSON and argument errors are ValueErrors
        status.value = message(f"{type(exc).__name__}: {exc}", error=True)
