"""The Redis store's Lua scripts, kept as ``.lua`` files beside this module and loaded by name.

Every write script runs over the keys of ONE thread, which all share one hash tag and so one
cluster slot: it is atomic, and it ends by re-applying the thread's waiting retention as the
absolute expiry of every key the thread has (``prelude.lua``'s ``apply_ttl``). Read scripts are
flagged ``no-writes`` and never touch an expiry.

A script's first line says what it is built on: ``--! write`` (the thread's keys and the write
prelude), ``--! read`` (the ``no-writes`` flag and the thread's keys), ``--! keys`` (the
thread's keys only); a script without that line runs as it is (the index and lock scripts,
whose keys are not a thread's). Numbers that do not fit a Lua double exactly are never
computed in a script: times travel as decimal strings of microseconds, written with ``%.0f``
(exact below 2**53, i.e. until the year 2255).
"""

from __future__ import annotations

import functools
from importlib import resources

#: The thread's keys, in the order every script receives them.
THREAD_KEYS = ("m", "c", "i", "s", "x", "w", "wx", "p", "sy", "od", "os", "ix", "e")


def _file(name: str) -> str:
    return (resources.files(__package__) / "scripts" / f"{name}.lua").read_text("utf-8")


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (``put``, ``latest``, …), with what it is built on."""
    text = _file(name)
    first, _, rest = text.partition("\n")
    kind = first.removeprefix("--! ").strip() if first.startswith("--! ") else ""
    keys = _file("keys")
    built_on = {
        "write": keys + _file("prelude"),
        "read": "#!lua flags=no-writes\n" + keys,
        "keys": keys,
        "": "",
    }
    return built_on[kind] + (rest if kind else text)
