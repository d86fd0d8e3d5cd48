"""Customer-held encryption of checkpoint state (BYOK): the keyring, the envelope, the sealer.

A store opened with a keyring (``durability.open(url, keyring=…)``, or
``DURABILITY_ENCRYPTION_KEYS`` in its environment) seals every checkpoint's state and every
pending write's value before they are written, and opens them when they are read; every other
field stays clear. ``import durability.crypto`` needs no ``cryptography``; :func:`sealer_for`
does, and refuses naming the ``crypto`` extra when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durability._extras import missing_extra
from durability.crypto.format import (
    ENVELOPE_PREFIX,
    ENVELOPE_VERSION,
    SCHEME,
    Sealed,
    is_sealed,
    key_id_of,
)
from durability.crypto.keyring import ENV_KEYS, ENV_KEYS_FILE, Keyring, new_key_line

if TYPE_CHECKING:
    from durability.crypto.envelope import Sealer


def sealer_for(keyring: Keyring) -> Sealer:
    """The sealer of ``keyring``; :class:`~durability.errors.MissingExtra` naming the ``crypto``
    extra when ``cryptography`` is not installed (never a silent clear write)."""
    try:
        from durability.crypto.envelope import Sealer
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "encrypted checkpoint state (keys are configured)") from exc
    return Sealer(keyring)


__all__ = [
    "ENVELOPE_PREFIX",
    "ENVELOPE_VERSION",
    "ENV_KEYS",
    "ENV_KEYS_FILE",
    "SCHEME",
    "Keyring",
    "Sealed",
    "is_sealed",
    "key_id_of",
    "new_key_line",
    "sealer_for",
]
