"""The customer's keys: which ids are known, which one is current, and where they come from.

A keyring holds 32-byte keys by id; the current one seals new writes, every listed one opens
the rows sealed under it. Keys come from:

* ``DURABILITY_ENCRYPTION_KEYS=keyid:BASE64KEY[,keyid:BASE64KEY…]`` (the first is current),
* a file of the same lines (``DURABILITY_ENCRYPTION_KEYS_FILE=path``, or :meth:`Keyring.from_file`;
  one ``keyid:BASE64KEY`` per line or comma, ``#`` starts a comment),
* code: ``Keyring({"k2": key2, "k1": key1})``, or a callable ``fetch(key_id) -> bytes | None``
  (the hook a KMS client plugs into: it is asked once per key id, and its answer is kept).

A key never appears in a ``repr``, a message or a log line: only its id does.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from durability.errors import ConfigError

#: The variable holding the keys (the first is current).
ENV_KEYS = "DURABILITY_ENCRYPTION_KEYS"
#: The variable naming a file of key lines.
ENV_KEYS_FILE = "DURABILITY_ENCRYPTION_KEYS_FILE"
#: A key's length in bytes (AES-256).
KEY_BYTES = 32

_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

#: The KMS hook: the key with this id, or ``None`` when the KMS has no such key.
KeyFetcher = Callable[[str], bytes | None]


def check_key_id(key_id: str) -> str:
    """``key_id`` if it is a usable key id (1–64 of letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise ConfigError(
            f"cannot use the key id {str(key_id)[:80]!r}: a key id is 1 to 64 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit; rename it"
        )
    return key_id


def _check_key(key_id: str, key: object) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
        size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
        raise ConfigError(
            f"cannot use the key {key_id!r}: it must be {KEY_BYTES} bytes (AES-256), and it is "
            f"{size}; make one with `durability keys new`"
        )
    return bytes(key)


class Keyring:
    """Customer-held keys by id; one of them is current (it seals new writes).

    Args:
        keys: Key id → 32-byte key, in order; the first is current unless ``current`` says.
        current: The id new writes are sealed under.
        fetch: Asked for a key id the mapping lacks (a KMS hook); its answer is kept.
    """

    __slots__ = ("_fetch", "_keys", "_lock", "current")

    def __init__(
        self,
        keys: Mapping[str, bytes] | None = None,
        *,
        current: str | None = None,
        fetch: KeyFetcher | None = None,
    ) -> None:
        self._keys = {check_key_id(k): _check_key(k, v) for k, v in (keys or {}).items()}
        self._fetch = fetch
        self._lock = threading.Lock()
        if current is None:
            if not self._keys:
                raise ConfigError(
                    "cannot build a keyring: it holds no key and names no current one; give "
                    "keys, or current= with fetch= to ask a KMS"
                )
            current = next(iter(self._keys))
        self.current = check_key_id(current)
        if self.key(current) is None:
            raise ConfigError(
                f"cannot build a keyring whose current key is {current!r}: no such key is "
                "listed or fetched; list it first"
            )

    def __repr__(self) -> str:
        return f"<Keyring current={self.current!r} ids={self.ids}>"

    @property
    def ids(self) -> list[str]:
        """The key ids known so far (listed, or already fetched), current first."""
        return [self.current, *(k for k in self._keys if k != self.current)]

    def key(self, key_id: str) -> bytes | None:
        """The key with this id, or ``None`` when the keyring (and its fetcher) lacks it."""
        found = self._keys.get(key_id)
        if found is not None or self._fetch is None:
            return found
        with self._lock:
            if key_id not in self._keys:
                fetched = self._fetch(key_id)
                if fetched is None:
                    return None
                self._keys[key_id] = _check_key(key_id, fetched)
            return self._keys[key_id]

    def with_current(self, key_id: str) -> Keyring:
        """A keyring with the same keys whose current key is ``key_id``."""
        return Keyring(self._keys, current=key_id, fetch=self._fetch)

    @classmethod
    def parse(cls, text: str, *, source: str = ENV_KEYS) -> Keyring:
        """Read ``keyid:BASE64KEY`` entries separated by commas or lines (the first is current).

        A refusal names the entry by position and id, never its key.
        """
        keys: dict[str, bytes] = {}
        entries = [
            e.strip()
            for line in text.splitlines()
            for e in line.partition("#")[0].split(",")
            if e.strip()
        ]
        for n, entry in enumerate(entries, 1):
            key_id, sep, encoded = entry.partition(":")
            where = f"entry {n} of {source}"
            if not sep:
                raise ConfigError(
                    f"cannot read {where}: it is not keyid:BASE64KEY; make a line with "
                    "`durability keys new`"
                )
            check_key_id(key_id.strip())
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError(
                    f"cannot read {where} (key id {key_id.strip()!r}): its key is not base64; "
                    "make a line with `durability keys new`"
                ) from None
            if key_id.strip() in keys:
                raise ConfigError(f"cannot read {where}: the key id {key_id.strip()!r} repeats")
            keys[key_id.strip()] = _check_key(key_id.strip(), key)
        if not keys:
            raise ConfigError(f"cannot read {source}: it holds no keyid:BASE64KEY entry")
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """The keys in a file of ``keyid:BASE64KEY`` lines (the first is current)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the key file {str(path)!r}: {exc.strerror}; check the path"
            ) from None
        return cls.parse(text, source=f"the key file {str(path)!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring ``DURABILITY_ENCRYPTION_KEYS`` (or ``…_FILE``) configures, or ``None``."""
        env = os.environ if environ is None else environ
        text, path = env.get(ENV_KEYS, "").strip(), env.get(ENV_KEYS_FILE, "").strip()
        if text and path:
            raise ConfigError(
                f"cannot read the encryption keys: both {ENV_KEYS} and {ENV_KEYS_FILE} are set; "
                "keep one"
            )
        if text:
            return cls.parse(text)
        return cls.from_file(path) if path else None


def new_key_line(key_id: str | None = None) -> str:
    """A fresh ``keyid:BASE64KEY`` line (random 32-byte key; the id defaults to today's date)."""
    key_id = check_key_id(key_id or datetime.now(UTC).strftime("k%Y%m%d-") + secrets.token_hex(2))
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


__all__ = ["ENV_KEYS", "ENV_KEYS_FILE", "KEY_BYTES", "KeyFetcher", "Keyring", "new_key_line"]
