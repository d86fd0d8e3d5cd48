"""A griffe extension for the API reference: the docstrings' Sphinx roles as plain code.

The library's docstrings name other objects the Sphinx way (``:class:`~durability.errors.LeaseHeld```,
``:func:`plan_sweep```, ``:data:`PAUSED```). mkdocstrings reads Markdown, where those roles would
show as raw text; this turns each into inline code of the name a reader sees (the last dotted
part when the target starts with ``~``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with every Sphinx cross-reference role replaced by inline code."""

    def code(match: re.Match[str]) -> str:
        tilde, target = match.groups()
        return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"

    return ROLE.sub(code, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
