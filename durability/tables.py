"""Tables people can work with: sortable, searchable, paged, in people's units.

:func:`html` turns a frame into an interactive table (itables / DataTables) for the static
report, :func:`show` displays one in a notebook, and :func:`readable` is the plain copy with
people's units. In the interactive tables the cells keep their numbers, so a column sorts by
value, while the page shows ``1.2 MiB``, ``3d 4h`` and ids cut to their first characters (the
full id in the cell's tooltip, and found by the search box). The columns that matter come
first (:data:`FIRST`). The frames themselves, and every ``--json``, keep the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durability._extras import needs_extra
from durability.humanize import format_age, format_bytes
from durability.vocabulary import status_word

with needs_extra("durability.tables"):  # the notebook extra
    import pandas as pd

#: Columns shown first, in this order, when a frame has them.
FIRST = (
    "thread_id",
    "owner",
    "runner",
    "node",
    "key",
    "policy",
    "role",
    "day",
    "status",
    "restorable",
    "action",
    "horizon",
    "state",
    "size_bytes",
    "checkpoints",
    "threads",
)
#: An id longer than this is shown cut, with the full id in its tooltip.
ID_SHOWN = 8
#: Rows per page of an interactive table.
PAGE_LENGTH = 10

_BYTES_JS = """
function (data, type) {
  if (type !== 'display' || data === null || data === undefined || data === '') return data;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let size = Math.abs(Number(data)), unit = 0;
  while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit += 1; }
  const sign = Number(data) < 0 ? '-' : '';
  return unit === 0 ? sign + Math.trunc(size) + ' B' : sign + size.toFixed(1) + ' ' + units[unit];
}"""
_AGE_JS = """
function (data, type) {
  if (type !== 'display' || data === null || data === undefined || data === '') return data;
  let left = Math.trunc(Math.abs(Number(data)));
  const parts = [];
  for (const [unit, span] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    const count = Math.trunc(left / span);
    left -= count * span;
    if (count || (unit === 's' && parts.length === 0)) parts.push(count + unit);
    if (parts.length === 2) break;
  }
  return (Number(data) < 0 ? 'in ' : '') + parts.join(' ');
}"""
_ID_JS = """
function (data, type) {
  if (type !== 'display' || data === null || data === undefined) return data;
  const text = String(data);
  if (text.length <= LONGEST) return text;
  const esc = (s) => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
  return '<span title="' + esc(text) + '">' + esc(text.slice(0, SHOWN)) + '…</span>';
}""".replace("LONGEST", str(ID_SHOWN + 4)).replace("SHOWN", str(ID_SHOWN))


def is_bytes_column(name: str) -> bool:
    """A column holding byte counts: ``bytes``, ``size_bytes``, ``kept_bytes`` …"""
    return name == "bytes" or name.endswith("_bytes") or name.startswith("bytes_")


def is_id_column(name: str) -> bool:
    """A column holding ids: ``thread_id``, ``checkpoint_id``, ``up_to_checkpoint`` …"""
    return name.endswith("_id") or name == "up_to_checkpoint"


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the :data:`FIRST` columns it has first, the others after, in order."""
    first = [c for c in FIRST if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def _cell(value: Any, render: Any) -> Any:
    return "" if value is None or pd.isna(value) else render(value)


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with people's units: byte columns (:func:`is_bytes_column`) in binary
    units, durations as ages, aware times as ``YYYY-MM-DD HH:MM`` (UTC), statuses in the one
    vocabulary (:mod:`durability.vocabulary`). Every other column is left as it is."""
    out = frame.copy()
    for name in out.columns:
        column = out[name]
        if is_bytes_column(str(name)) and pd.api.types.is_numeric_dtype(column):
            out[name] = [_cell(v, format_bytes) for v in column]
        elif pd.api.types.is_timedelta64_dtype(column):
            out[name] = [_cell(v, lambda t: format_age(t.to_pytimedelta())) for v in column]
        elif pd.api.types.is_datetime64_any_dtype(column):
            out[name] = [_cell(v, lambda t: t.strftime("%Y-%m-%d %H:%M")) for v in column]
        elif str(name) == "status":
            out[name] = [status_word(v) if isinstance(v, str) else v for v in column]
    return out


def interactive(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The frame an interactive table holds, and its DataTables ``columnDefs``.

    Columns are :func:`ordered`; times become ``YYYY-MM-DD HH:MM`` text (which sorts as time),
    durations seconds (shown as ages), statuses the one vocabulary, missing values empty; byte
    counts stay numbers shown in binary units, ids stay whole and show cut.
    """
    from itables import JavascriptFunction

    out = ordered(frame).reset_index(drop=True).copy()
    renders: dict[str, str] = {}
    for name in out.columns:
        column, key = out[name], str(name)
        if pd.api.types.is_timedelta64_dtype(column):
            out[name] = column.dt.total_seconds()
            renders[key] = _AGE_JS
        elif pd.api.types.is_datetime64_any_dtype(column):
            out[name] = [_cell(v, lambda t: t.strftime("%Y-%m-%d %H:%M")) for v in column]
        elif is_bytes_column(key) and pd.api.types.is_numeric_dtype(column):
            renders[key] = _BYTES_JS
        elif is_id_column(key):
            out[name] = column.astype("string").fillna("")
            renders[key] = _ID_JS
        elif key == "status" or isinstance(column.dtype, pd.CategoricalDtype):
            out[name] = [status_word(str(v)) if pd.notna(v) else "" for v in column]
    names = [str(c) for c in out.columns]
    defs = [
        {"targets": [names.index(name)], "render": JavascriptFunction(js)}
        for name, js in renders.items()
    ]
    return out, defs


def _options(defs: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """itables options: every table searchable; page controls once it has several pages."""
    paged = rows > PAGE_LENGTH
    return {
        "columnDefs": defs,
        "pageLength": PAGE_LENGTH,
        "lengthMenu": [10, 25, 100, 500],
        "layout": {
            "topStart": "pageLength" if paged else None,
            "topEnd": "search",
            "bottomStart": "info" if paged else None,
            "bottomEnd": "paging" if paged else None,
        },
        "maxBytes": 0,
        "showIndex": False,
        "classes": "display nowrap compact",
        # A click anywhere on a header sorts (itables otherwise keeps the title's text
        # selectable and sorts on the arrow only).
        "text_in_header_can_be_selected": False,
    }


def page_head() -> str:
    """The script and style every page of interactive tables needs once, inline (the page
    works offline)."""
    import itables
    from itables.javascript import generate_init_offline_itables_html

    bundle = itables.__file__.rsplit("/", 1)[0] + "/html/dt_bundle.js"
    return str(generate_init_offline_itables_html(bundle))


def html(frame: pd.DataFrame, caption: str | None = None) -> str:
    """An interactive table of ``frame`` for a page that has :func:`page_head` (see
    :func:`interactive`)."""
    from itables import to_html_datatable

    data, defs = interactive(frame)
    return str(
        to_html_datatable(data, caption=caption, connected=False, **_options(defs, len(data)))
    )


def init_notebook() -> None:
    """Make every DataFrame a notebook displays a sortable, searchable, paged table (offline:
    the page needs no network); :func:`show` adds people's units and cut ids."""
    import itables
    from IPython.utils.capture import capture_output

    # itables displays its dark-mode script first and the offline bundle it awaits second; in
    # JupyterLab the first then runs before the bundle exists and throws. Shown bundle first.
    with capture_output(stdout=False, stderr=False) as shown:
        itables.init_notebook_mode(all_interactive=True, connected=False)
    for output in reversed(shown.outputs):
        output.display()  # type: ignore[no-untyped-call]


def show(frame: pd.DataFrame, caption: str | None = None) -> None:
    """Display ``frame`` in a notebook as a sortable, searchable, paged table in people's
    units (after :func:`init_notebook`)."""
    import itables

    data, defs = interactive(frame)
    itables.show(data, caption=caption, connected=False, **_options(defs, len(data)))


# ---------------------------------------------------------------------------- pages of rows


@dataclass(frozen=True)
class Page:
    """One page of a frame as a table view shows it (:func:`page`)."""

    #: The page's rows, with the frame's own values and index.
    rows: pd.DataFrame
    #: The rows the search matched (all of them when there is no search).
    matches: int
    #: The page shown (from 0; a page past the last is the last) and how many there are.
    number: int
    pages: int


def search_text(frame: pd.DataFrame) -> pd.Series:
    """Each row's cells as people read them (:func:`readable`), in one lower-case text: what a
    table view's search looks in (made once per frame)."""
    shown = readable(frame).astype("string").fillna("")
    if shown.empty:
        return pd.Series([], index=frame.index, dtype="string")
    return shown.agg(" ".join, axis=1).str.lower()


def page(
    frame: pd.DataFrame,
    *,
    text: pd.Series | None = None,
    search: str = "",
    sort: str | None = None,
    descending: bool = False,
    number: int = 0,
    size: int = PAGE_LENGTH,
) -> Page:
    """Page ``number`` of ``size`` rows of ``frame``: the rows whose :func:`search_text`
    (``text``, made here when not given) contains ``search`` (any case), sorted by the values
    of column ``sort`` (numbers as numbers, times as times, missing values last)."""
    if search.strip():
        haystack = search_text(frame) if text is None else text
        frame = frame[haystack.str.contains(search.strip().lower(), regex=False).to_numpy()]
    if sort is not None and sort in frame.columns:
        frame = frame.sort_values(sort, ascending=not descending, na_position="last", kind="stable")
    pages = max(1, -(-len(frame) // size))
    number = min(max(number, 0), pages - 1)
    return Page(frame.iloc[number * size : (number + 1) * size], len(frame), number, pages)


def text_table(
    frame: pd.DataFrame, *, widest: int = 28, id_chars: int = 16
) -> tuple[str, list[str]]:
    """``frame`` as a header line and one line per row of fixed-width text, in people's units,
    ids cut to ``id_chars`` characters (enough to tell ``conversation-12`` from a UUID) and
    every cell to ``widest``: a table's rows for a list a reader picks one from."""
    shown = readable(ordered(frame)).astype("string").fillna("")
    for name in shown.columns:
        if is_id_column(str(name)):
            shown[name] = [
                v if len(v) <= id_chars else v[: id_chars - 1] + "…" for v in shown[name]
            ]
    cells = {
        str(name): [v if len(v) <= widest else v[: widest - 1] + "…" for v in shown[name]]
        for name in shown.columns
    }
    widths = {name: max([len(name), *map(len, values)]) for name, values in cells.items()}
    numeric = {str(n) for n in frame.columns if pd.api.types.is_numeric_dtype(frame[n])}

    def line(values: dict[str, str]) -> str:
        return "  ".join(
            values[n].rjust(w) if n in numeric else values[n].ljust(w) for n, w in widths.items()
        ).rstrip()

    header = line({name: name for name in widths})
    return header, [line({n: cells[n][i] for n in cells}) for i in range(len(shown))]


__all__ = [
    "FIRST",
    "PAGE_LENGTH",
    "Page",
    "html",
    "init_notebook",
    "interactive",
    "is_bytes_column",
    "is_id_column",
    "ordered",
    "page",
    "page_head",
    "readable",
    "search_text",
    "show",
    "text_table",
]
