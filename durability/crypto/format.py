"""What a sealed payload looks like in a store, readable without ``cryptography`` or a key.

A sealed payload is a compact JSON object whose first member is ``"$t": "enc"`` (the codec's
typed-envelope mark with a tag the codec never writes for a user value), so a store's state
column, the Redis document and the wire's ``state_snapshot`` hold it where the clear codec text
would be. Its members, in this order:

====  ========================================================================================
key   meaning
====  ========================================================================================
$t    ``"enc"``
v     envelope version (1)
s     scheme: ``A256GCM-HKDF-SHA256`` (AES-256-GCM under a data key derived per thread)
k     the customer key id the data key was derived from
z     HKDF salt (base64, 16 bytes)
n     GCM nonce (base64, 12 bytes)
x     ``"deflate"`` when the plaintext was compressed before encryption, else ``""``
c     ciphertext with its 16-byte tag (base64)
====  ========================================================================================

Only the key id, scheme and sizes can be read from it; everything else needs the key.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

#: Every sealed payload's text starts with this (the codec never writes it for a user value).
ENVELOPE_PREFIX = '{"$t":"enc",'
#: The envelope version this package writes and reads.
ENVELOPE_VERSION = 1
#: The only scheme of version 1.
SCHEME = "A256GCM-HKDF-SHA256"


def is_sealed(text: str) -> bool:
    """Whether a stored payload text is a sealed envelope (else it is codec text in clear)."""
    return text.startswith(ENVELOPE_PREFIX)


def key_id_of(text: str) -> str | None:
    """The key id a sealed payload text names, or ``None`` for a clear or damaged one."""
    if not text.startswith(ENVELOPE_PREFIX):
        return None
    start = text.find('"k":"', len(ENVELOPE_PREFIX), 80)  # where this package's writer puts it
    end = text.find('"', start + 5, start + 75) if start > 0 else -1
    if end > 0:
        return text[start + 5 : end]
    try:
        key_id = orjson.loads(text).get("k")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return key_id if isinstance(key_id, str) else None


@dataclass(frozen=True, slots=True)
class Sealed:
    """A payload held as its sealed envelope, not opened: what a store without the keyring
    reads, what a restore carries from the plane, and what a put stores as it is.

    Its ``repr`` names the key id and size only.
    """

    text: str

    @property
    def key_id(self) -> str | None:
        """The key id the envelope names."""
        return key_id_of(self.text)

    def __repr__(self) -> str:
        return f"<Sealed payload under key {self.key_id!r}, {len(self.text)} bytes>"


__all__ = ["ENVELOPE_PREFIX", "ENVELOPE_VERSION", "SCHEME", "Sealed", "is_sealed", "key_id_of"]
