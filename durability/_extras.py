"""Which optional packages come with which extra of ``durability-toolkit``.

The core install carries what a checkpointing worker and an operator's sweep need on the
embedded SQLite default; everything else is an extra. Code that needs an extra imports its
packages inside :func:`needs_extra` (or turns a missing one into
:class:`~durability.errors.MissingExtra` with :func:`missing_extra`), so the refusal names what
to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from durability.errors import MissingExtra

#: Top-level module → the extra that installs it.
EXTRA_OF_MODULE = {
    "psycopg": "postgres",
    "redis": "redis",
    "cryptography": "crypto",
    "starlette": "plane",
    "uvicorn": "plane",
    "pandas": "notebook",
    "matplotlib": "notebook",
    "ipywidgets": "notebook",
    "IPython": "notebook",
    "ipykernel": "notebook",
    "jupyterlab": "notebook",
    "jupyter_client": "notebook",
    "nbclient": "notebook",
    "nbformat": "notebook",
    "langgraph": "langgraph",
    "langchain_core": "langgraph",
}


def missing_extra(exc: ModuleNotFoundError, feature: str) -> ImportError:
    """The refusal of ``feature`` for the module ``exc`` could not find: :class:`MissingExtra`
    naming its extra, or ``exc`` itself for a module no extra installs."""
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return exc
    return MissingExtra(
        f"cannot use {feature}: it needs {module}, which comes with the {extra!r} extra; "
        f"install it with: pip install 'durability-toolkit[{extra}]'",
        name=module,
    )


@contextmanager
def needs_extra(feature: str) -> Iterator[None]:
    """Imports in this block that find no module an extra installs refuse ``feature`` with
    :class:`MissingExtra` naming that extra (see :func:`missing_extra`)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, feature) from exc
