"""What every CLI command shares: opening a store, printing tables and JSON, mapping errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from durability.errors import DurabilityError

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
url_argument = click.argument("url", envvar="DURABILITY_URL", metavar="URL")


def out_option(default: str, what: str) -> Callable[[F], F]:
    """``--out``: the folder a command writes into, as a :class:`Path`; ``what`` is its help."""
    return click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path(default),
        show_default=True,
        help=what,
    )


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration option: seconds (``30``, ``0.5``) or a duration (``30s``, ``5m``, ``PT1M``);
    the value is in seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from durability.settings import parse_duration

        if isinstance(value, int | float):
            seconds = float(value)
        else:
            text = str(value).strip()
            try:
                seconds = float(text)
            except ValueError:
                try:
                    seconds = parse_duration(
                        text, name=param.name if param else "duration"
                    ).total_seconds()
                except DurabilityError as exc:
                    self.fail(str(exc), param, ctx)
        if not 0 <= seconds < float("inf"):
            self.fail(f"{value!r} must be 0 or more seconds", param, ctx)
        return seconds


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Show a durability error as one line on stderr and exit 1, instead of a traceback."""
    try:
        yield
    except DurabilityError as exc:
        raise click.ClickException(str(exc)) from exc


def open_store(url: str, **options: Any) -> Any:
    """Open ``url`` with settings from the environment (refusing removed variables)."""
    import durability

    return durability.open(url, **options)


def to_jsonable(value: Any) -> Any:
    """Plain JSON for CLI output: datetimes as ISO 8601, durations as seconds."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def print_json(value: Any) -> None:
    """Write ``value`` as indented JSON to stdout."""
    click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))


def cell(value: Any, width: int = 40) -> str:
    """One table cell: short, single-line text."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, timedelta):
        from durability.settings import format_duration

        text = format_duration(value)
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int = 40) -> None:
    """Print rows as an aligned text table (cells cut at ``width`` characters)."""
    cells = [[cell(v, width) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    click.echo(line.rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(none)", err=sys.stderr.isatty())


#: The columns every table of checkpoints shows, between its order column and any size.
CHECKPOINT_COLUMNS = (
    "checkpoint",
    "namespace",
    "run",
    "node",
    "step",
    "step type",
    "status",
    "created",
)

#: Where the CLI finds the plane when a command may talk to one.
ENV_PLANE_URL = "DURABILITY_PLANE_URL"
ENV_PLANE_KEY = "DURABILITY_PLANE_API_KEY"
ENV_PROJECT = "DURABILITY_PROJECT"


def plane_options(*, required: bool) -> Callable[[F], F]:
    """``--plane``, ``--api-key-env`` and ``--project``, with their environment defaults."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--project",
            envvar=ENV_PROJECT,
            default="",
            metavar="P",
            help=f"The local project the connection replicates [env {ENV_PROJECT}; default none].",
        )(fn)
        fn = click.option(
            "--api-key-env",
            default=ENV_PLANE_KEY,
            show_default=True,
            metavar="NAME",
            help="The environment variable holding the plane's API key (the key is never printed).",
        )(fn)
        return click.option(
            "--plane",
            "plane_url",
            envvar=ENV_PLANE_URL,
            required=required,
            default=None,
            metavar="TARGET",
            help=f"The plane's URL, e.g. https://plane.example.com [env {ENV_PLANE_URL}].",
        )(fn)

    return decorate


def plane_key(api_key_env: str) -> str:
    """The API key from the environment variable ``api_key_env``; refused by name when unset."""
    import os

    key = os.environ.get(api_key_env, "").strip()
    if not key:
        raise click.UsageError(
            f"no plane API key: set the environment variable {api_key_env} (or name another one "
            "with --api-key-env); create a key with `durability plane keys create`"
        )
    return key


def listen_options(default_port: int) -> Callable[[F], F]:
    """``--host`` (loopback by default) and ``--port`` for a command that serves HTTP."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--port",
            type=click.IntRange(0, 65535),
            default=default_port,
            show_default=True,
            help="Port to listen on.",
        )(fn)
        return click.option(
            "--host", default="127.0.0.1", show_default=True, help="Interface to listen on."
        )(fn)

    return decorate
