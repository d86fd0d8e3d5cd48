"""One vocabulary for people: the words of statuses, and the colours of statuses and policies.

Frames, charts, CLI tables, the static report and the widgets all read these, so a parked run
is ``parked`` everywhere and a policy in force has the same colour in every chart.

* A stored checkpoint's status is ``completed``, ``interrupted`` or ``failed`` (the store and
  wire format, unchanged). People read it through :func:`status_word`: an ``interrupted``
  checkpoint is a run waiting on an answer, ``parked`` (as ``durability runs`` and
  ``frames.runs`` say).
* Run statuses (:data:`RUN_STATUSES`): ``completed``, ``failed``, ``parked``, ``running``,
  ``stalled``, ``abandoned``.
* Policies: the values in force are drawn in :data:`IN_FORCE_COLOUR` (solid), any proposed
  value in :data:`PROPOSED_COLOUR` (dashed); :func:`policy_role` writes the legend text, which
  always says which one a line is.

This module imports nothing heavy: the CLI uses it too.
"""

from __future__ import annotations

from typing import Any, Final

#: The word people read for each stored checkpoint status.
STATUS_WORDS: Final = {"completed": "completed", "interrupted": "parked", "failed": "failed"}

#: The statuses of a run (``frames.runs``, ``durability runs``), in display order.
RUN_STATUSES: Final = ("completed", "failed", "parked", "running", "stalled", "abandoned")

#: The statuses the threads and checkpoints frames hold (a checkpoint's, in people's words).
CHECKPOINT_STATUSES: Final = ("completed", "failed", "parked")

#: One colour per status, whatever shows it (anything else is grey).
STATUS_COLOURS: Final = {
    "completed": "tab:green",
    "failed": "tab:red",
    "parked": "tab:orange",
    "running": "tab:blue",
    "stalled": "tab:brown",
    "abandoned": "tab:gray",
}

#: The colour of anything unknown.
OTHER_COLOUR: Final = "tab:gray"

#: The two roles a retention policy plays in a chart.
IN_FORCE: Final = "in force"
PROPOSED: Final = "proposed"

#: The colour and line style of the policy in force, in every chart.
IN_FORCE_COLOUR: Final = "black"
IN_FORCE_STYLE: Final = "-"
#: The colour and line style of a proposed policy, in every chart.
PROPOSED_COLOUR: Final = "tab:purple"
PROPOSED_STYLE: Final = "--"

#: Colours of the two retention horizons (neither is a policy colour).
HORIZON_COLOURS: Final = {"finished": "tab:cyan", "waiting": "tab:olive"}


def status_word(status: str | None) -> str | None:
    """The word people read for a stored or run status: ``interrupted`` -> ``parked``."""
    if status is None:
        return None
    return STATUS_WORDS.get(status, status)


def status_colour(status: str | None) -> str:
    """The colour of ``status`` (a stored or a run status) in every chart."""
    word = status_word(status)
    return STATUS_COLOURS.get(word, OTHER_COLOUR) if word is not None else OTHER_COLOUR


def policy_colour(role: str) -> str:
    """:data:`IN_FORCE_COLOUR` for ``"in force"``, :data:`PROPOSED_COLOUR` for ``"proposed"``."""
    if role == IN_FORCE:
        return IN_FORCE_COLOUR
    if role == PROPOSED:
        return PROPOSED_COLOUR
    raise ValueError(f"cannot colour policy role {role!r}: use {IN_FORCE!r} or {PROPOSED!r}")


def policy_style(role: str) -> dict[str, Any]:
    """Matplotlib line options (``color``, ``linestyle``) for a policy's ``role``."""
    style = IN_FORCE_STYLE if role == IN_FORCE else PROPOSED_STYLE
    return {"color": policy_colour(role), "linestyle": style}


def policy_role(label: str, role: str) -> str:
    """A legend entry that says which policy it is: ``in force: waiting 30d / finished 7d``."""
    policy_colour(role)  # refuses an unknown role
    return f"{role}: {label}"


__all__ = [
    "CHECKPOINT_STATUSES",
    "HORIZON_COLOURS",
    "IN_FORCE",
    "IN_FORCE_COLOUR",
    "IN_FORCE_STYLE",
    "OTHER_COLOUR",
    "PROPOSED",
    "PROPOSED_COLOUR",
    "PROPOSED_STYLE",
    "RUN_STATUSES",
    "STATUS_COLOURS",
    "STATUS_WORDS",
    "policy_colour",
    "policy_role",
    "policy_style",
    "status_colour",
    "status_word",
]
