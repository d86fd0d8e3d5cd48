"""Numbers for people: ages and sizes as ``31d 2h`` and ``1.2 MiB``, and sizes read back.

Tables a person reads use these; ``--json`` output and DataFrames keep the numbers themselves.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from durability.errors import ConfigError

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SPANS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*", re.IGNORECASE)
_FACTORS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def format_bytes(size: float) -> str:
    """``512 B``, ``1.2 MiB``, ``3.0 GiB``: binary units, one decimal past bytes."""
    if not math.isfinite(size):
        return str(size)
    sign, size = ("-" if size < 0 else ""), abs(size)
    unit = 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size /= 1024
        unit += 1
    if unit == 0:
        return f"{sign}{int(size)} B"
    return f"{sign}{size:.1f} {_UNITS[unit]}"


def format_age(age: timedelta | float) -> str:
    """An age (a timedelta or seconds) in its two largest units: ``31d 2h``, ``4m 10s``, ``4s``.

    Under a minute it is whole seconds (``0s`` for less than one); a negative age (a clock
    ahead of this one) reads ``in 5s``.
    """
    seconds = age.total_seconds() if isinstance(age, timedelta) else float(age)
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 0:
        return f"in {format_age(-seconds)}"
    whole = int(seconds)
    parts: list[str] = []
    for unit, span in _SPANS:
        count, whole = divmod(whole, span)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    return " ".join(parts)


def parse_size(text: str | int, *, name: str = "size") -> int:
    """Bytes from ``1048576``, ``64MiB``, ``64 MB`` or ``512k`` (binary multiples); positive.

    Raises:
        ConfigError: Not a size, or not positive; the message names ``name``.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.fullmatch(str(text))
        if match is None or len(match.group(1)) > 20:
            raise ConfigError(
                f"cannot read {name}={str(text)[:40]!r}: not a size; write it like 1048576, "
                "512KiB, 64MiB or 1GiB"
            )
        value = int(float(match.group(1)) * _FACTORS[match.group(2)[:1].lower()])
    if value < 1:
        raise ConfigError(f"cannot use {name}={value}: it must be at least 1 byte")
    return value


__all__ = ["format_age", "format_bytes", "parse_size"]
