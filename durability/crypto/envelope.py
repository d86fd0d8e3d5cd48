"""Sealing and opening payload texts: AES-256-GCM under a data key derived per thread.

Scheme ``A256GCM-HKDF-SHA256`` (envelope version 1, laid out in :mod:`durability.crypto.format`):

* data key = HKDF-SHA256(customer key, salt, info = ``durability/thread-key/1`` + thread id)
  (RFC 5869, two HMACs). A writer picks a random 16-byte salt per (key, thread) and keeps it for
  at most :data:`USES_PER_SALT` seals, so no data key sees more than 2**20 random 96-bit nonces
  (AES-GCM's safe bound under one key is about 2**32): 10,000 puts a second for years stays far
  inside it, whatever the thread count.
* associated data = envelope version, scheme, key id, compression, thread, namespace, checkpoint
  id and field, each length-prefixed: a ciphertext moved to another row or field, or a header
  edited, does not open.
* plaintext = the codec text, deflated first when that makes it shorter (texts of 256 bytes or
  more), then encrypted.

Erasure: data keys are derived, never stored, so there is no per-thread key to destroy; erasing
a thread deletes its rows, and copies elsewhere (backups, the plane) stay readable to a holder
of the customer key until that key is retired (decision 0090).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import os
import struct
import zlib

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from durability._util import short
from durability.crypto.format import ENVELOPE_PREFIX, ENVELOPE_VERSION, SCHEME
from durability.crypto.keyring import Keyring
from durability.errors import DecryptionFailed, KeyMissing

#: How many payloads a writer seals under one (key, thread, salt) before it picks a new salt.
USES_PER_SALT = 2**20
#: Texts this long or longer are deflated before encryption when that makes them shorter.
COMPRESS_FROM = 256
_INFO = b"durability/thread-key/1\x00"
_CACHE_LIMIT = 4096
_B64 = base64.b64encode
_LENGTHS = struct.Struct(">IIII").pack


def hkdf_sha256(key: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF with SHA-256 (extract, then expand; ``length`` ≤ 32 is one block)."""
    prk = hmac.digest(salt, key, "sha256")
    return hmac.digest(prk, info + b"\x01", "sha256")[:length]


@functools.lru_cache(maxsize=256)
def _header(key_id: str, compression: str) -> bytes:
    parts = [p.encode() for p in (str(ENVELOPE_VERSION), SCHEME, key_id, compression)]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def associated_data(
    key_id: str, compression: str, thread_id: str, namespace: str, checkpoint_id: str, field: str
) -> bytes:
    """What binds a ciphertext to its header and its row: the envelope version, scheme, key id
    and compression, then the four lengths of thread, namespace, checkpoint id and field, then
    those texts (so no two rows' associated data can be the same bytes)."""
    t, n, c, f = (
        x.encode("utf-8", "surrogatepass") for x in (thread_id, namespace, checkpoint_id, field)
    )
    return b"".join(
        (_header(key_id, compression), _LENGTHS(len(t), len(n), len(c), len(f)), t, n, c, f)
    )


def row_name(thread_id: str, namespace: str, checkpoint_id: str, field: str) -> str:
    """A row and field as messages name them."""
    where = f"thread {short(thread_id)}" + (f" namespace {short(namespace)}" if namespace else "")
    return f"{field} of checkpoint {short(checkpoint_id)} in {where}"


def _deflate(data: bytes) -> bytes:
    # A 4 KiB window and the least memory: a fifth of zlib's default set-up cost on 2 KB states.
    compressor = zlib.compressobj(1, zlib.DEFLATED, -12, 1)
    return compressor.compress(data) + compressor.flush()


class _Writer:
    """A writer's data key for one (key, thread): its salt, cipher and how often it sealed."""

    __slots__ = ("cipher", "salt", "uses")

    def __init__(self, salt: bytes, cipher: AESGCM) -> None:
        self.salt, self.cipher, self.uses = salt, cipher, 0


class Sealer:
    """Seals payload texts under a keyring's current key and opens them under any listed key.

    Thread-safe: the caches are plain dicts whose entries are replaced whole.
    """

    __slots__ = ("_readers", "_writers", "keyring")

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._writers: dict[tuple[str, str], _Writer] = {}
        # (key id, salt, thread) -> cipher
        self._readers: dict[tuple[str, bytes, str], AESGCM] = {}

    def __repr__(self) -> str:
        return f"<Sealer {self.keyring!r}>"

    def seal(
        self, text: str, thread_id: str, namespace: str, checkpoint_id: str, field: str
    ) -> str:
        """The envelope text sealing ``text`` (codec text) for this row and field."""
        plain = text.encode("utf-8", "surrogatepass")
        compression = ""
        if len(plain) >= COMPRESS_FROM:
            packed = _deflate(plain)
            if len(packed) < len(plain):
                plain, compression = packed, "deflate"
        return self._seal(plain, compression, (thread_id, namespace, checkpoint_id, field))

    def open(
        self, text: str, thread_id: str, namespace: str, checkpoint_id: str, field: str
    ) -> str:
        """The codec text an envelope seals; refusals name the row, the key id and the fix."""
        _key_id, compression, plain = self._unseal(
            text, (thread_id, namespace, checkpoint_id, field)
        )
        if compression == "deflate":
            plain = zlib.decompress(plain, -15)
        return plain.decode("utf-8", "surrogatepass")

    def reseal(
        self, text: str, thread_id: str, namespace: str, checkpoint_id: str, field: str
    ) -> str:
        """``text`` sealed under the current key instead (unchanged when it already is): the
        plaintext is opened and sealed again as it is, compressed or not."""
        row = (thread_id, namespace, checkpoint_id, field)
        key_id, compression, plain = self._unseal(text, row)
        if key_id == self.keyring.current:
            return text
        return self._seal(plain, compression, row)

    def _seal(self, plain: bytes, compression: str, row: tuple[str, str, str, str]) -> str:
        key_id = self.keyring.current
        salt, cipher = self._writer(key_id, row[0])
        nonce = os.urandom(12)
        sealed = cipher.encrypt(nonce, plain, associated_data(key_id, compression, *row))
        return (
            f'{ENVELOPE_PREFIX}"v":{ENVELOPE_VERSION},"s":"{SCHEME}","k":"{key_id}",'
            f'"z":"{_B64(salt).decode()}","n":"{_B64(nonce).decode()}","x":"{compression}",'
            f'"c":"{_B64(sealed).decode()}"}}'
        )

    def _unseal(self, text: str, row: tuple[str, str, str, str]) -> tuple[str, str, bytes]:
        """The key id, compression and (still compressed) plaintext of an envelope."""
        try:
            env = orjson.loads(text)
            version, scheme, key_id = env["v"], env["s"], str(env["k"])
            salt, nonce = base64.b64decode(env["z"]), base64.b64decode(env["n"])
            compression, sealed = str(env["x"]), base64.b64decode(env["c"])
        except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error, ValueError):
            raise DecryptionFailed(
                f"cannot open the {row_name(*row)}: its envelope is damaged (not the layout of version "
                f"{ENVELOPE_VERSION}); restore the row from a backup or the plane"
            ) from None
        if version != ENVELOPE_VERSION or scheme != SCHEME:
            raise DecryptionFailed(
                f"cannot open the {row_name(*row)}: it was sealed with envelope version {version!r}, "
                f"scheme {str(scheme)[:40]!r}, and this version reads {ENVELOPE_VERSION} "
                f"({SCHEME}); open it with the version that wrote it"
            )
        cipher = self._reader(key_id, salt, row)
        try:
            plain = cipher.decrypt(nonce, sealed, associated_data(key_id, compression, *row))
        except (InvalidTag, ValueError):
            raise DecryptionFailed(
                f"cannot open the {row_name(*row)}: its ciphertext does not authenticate under key "
                f"{key_id!r} (tampered, damaged, or moved from another row or field); restore "
                "the row from a backup or the plane"
            ) from None
        return key_id, compression, plain

    def _writer(self, key_id: str, thread_id: str) -> tuple[bytes, AESGCM]:
        entry = self._writers.get((key_id, thread_id))
        if entry is None or entry.uses >= USES_PER_SALT:
            salt = os.urandom(16)
            entry = _Writer(salt, self._derive(key_id, salt, thread_id))
            if len(self._writers) >= _CACHE_LIMIT:
                self._writers.clear()
            self._writers[(key_id, thread_id)] = entry
            self._readers[(key_id, salt, thread_id)] = entry.cipher
        entry.uses += 1
        return entry.salt, entry.cipher

    def _reader(self, key_id: str, salt: bytes, row: tuple[str, str, str, str]) -> AESGCM:
        thread_id = row[0]
        cipher = self._readers.get((key_id, salt, thread_id))
        if cipher is None:
            if self.keyring.key(key_id) is None:
                raise KeyMissing(
                    f"cannot open the {row_name(*row)}: it is sealed under key {key_id!r}, which the "
                    f"keyring (ids {self.keyring.ids}) does not hold; add that key to "
                    "DURABILITY_ENCRYPTION_KEYS (after the current one) or to the keyring"
                )
            cipher = self._derive(key_id, salt, thread_id)
            if len(self._readers) >= _CACHE_LIMIT:
                self._readers.clear()
            self._readers[(key_id, salt, thread_id)] = cipher
        return cipher

    def _derive(self, key_id: str, salt: bytes, thread_id: str) -> AESGCM:
        key = self.keyring.key(key_id)
        assert key is not None  # the current key is checked when the keyring is built
        info = _INFO + thread_id.encode("utf-8", "surrogatepass")
        return AESGCM(hkdf_sha256(key, salt, info))


__all__ = ["COMPRESS_FROM", "USES_PER_SALT", "Sealer", "associated_data", "hkdf_sha256", "row_name"]
