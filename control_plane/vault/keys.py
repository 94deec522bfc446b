"""Key-encryption keys (KEKs): the interface, the key-file implementation, and the keyring.

A KEK never encrypts secrets itself; it wraps the per-credential data keys (``crypto``). It sits
behind :class:`KeyEncryptionKey` so that a KMS (AWS KMS ``Encrypt``/``Decrypt`` with an encryption
context, Vault Transit, ...) can replace the key file later: the methods are ``async`` because such
a backend makes a network call, and they take the associated data so the backend can bind the
wrapped key to the credential row (as an encryption context).

:class:`FileKek` keeps a 32-byte key in a file that only its owner may read (``0600``; a file open
to group or others is refused, like ssh refuses a private key). Its ``key_id`` is a keyed
fingerprint of the key, so it is stable across restarts and says nothing about the key.

:class:`Keyring` holds the current KEK (new data keys are wrapped with it) and previous ones
(still accepted for unwrapping until rotation has re-wrapped every data key; see
``VaultService.rotate``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from control_plane.vault.errors import DecryptionFailed, KeyFileError, UnknownKey

__all__ = [
    "KEY_BYTES",
    "FileKek",
    "KeyEncryptionKey",
    "Keyring",
    "create_key_file",
    "load_or_create_key_file",
    "read_key_file",
]

KEY_BYTES = 32  # AES-256
_NONCE_BYTES = 12
_WRAP_LABEL = b"outpost-vault-wrap-v1\x00"  # domain separation: a wrap is not a payload seal
_KEY_ID_LABEL = b"outpost-vault-key-id-v1"


@runtime_checkable
class KeyEncryptionKey(Protocol):
    """Wraps and unwraps data keys. ``aad`` must be the same for both, or ``unwrap`` fails."""

    @property
    def key_id(self) -> str: ...

    async def wrap(self, data_key: bytes, aad: bytes) -> bytes: ...

    async def unwrap(self, wrapped: bytes, aad: bytes) -> bytes:
        """The data key; raises ``DecryptionFailed`` if ``wrapped`` or ``aad`` do not authenticate."""
        ...


# -- key files ------------------------------------------------------------------------------------


def read_key_file(path: Path, size: int = KEY_BYTES) -> bytes:
    """Read a raw key of ``size`` bytes. Refuses a symlink, a non-regular file, a file that group or
    others can access in any way, and a file of the wrong size (``KeyFileError``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyFileError(f"key file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"key file {str(path)!r} cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"key file {str(path)!r} is not a regular file")
        if info.st_mode & 0o077:
            raise KeyFileError(
                f"key file {str(path)!r} has mode {stat.S_IMODE(info.st_mode):04o}: group and others "
                "must have no access (chmod 600)"
            )
        if info.st_size != size:
            raise KeyFileError(f"key file {str(path)!r} must hold exactly {size} bytes")
        data = os.read(fd, size + 1)
    finally:
        os.close(fd)
    if len(data) != size:
        raise KeyFileError(f"key file {str(path)!r} must hold exactly {size} bytes")
    return data


def create_key_file(path: Path, size: int = KEY_BYTES) -> bytes:
    """Create ``path`` (mode 0600, never overwriting) holding ``size`` random bytes; fsynced.
    Raises ``FileExistsError`` if it exists."""
    key = secrets.token_bytes(size)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise
    except OSError as exc:
        raise KeyFileError(f"key file {str(path)!r} cannot be created: {exc.strerror}") from None
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def load_or_create_key_file(path: Path, size: int = KEY_BYTES) -> bytes:
    """Read the key file, creating it first if it does not exist (safe against a concurrent
    creator: exactly one wins, the other reads the winner's key)."""
    if not path.exists() and not path.is_symlink():
        with contextlib.suppress(FileExistsError):  # a concurrent creator won
            create_key_file(path, size)
    return read_key_file(path, size)


# -- the file KEK ---------------------------------------------------------------------------------


class FileKek:
    """A KEK held in process memory, loaded from a key file. Wrapping is AES-256-GCM with a random
    nonce: ``wrapped = nonce || ciphertext-and-tag`` of the data key, with the caller's ``aad``."""

    __slots__ = ("_aead", "_key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise KeyFileError(f"a key-encryption key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)
        digest = hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()
        self._key_id = "kek_" + digest[:24]

    @classmethod
    def load(cls, path: Path) -> FileKek:
        return cls(read_key_file(path))

    @classmethod
    def load_or_create(cls, path: Path) -> FileKek:
        return cls(load_or_create_key_file(path))

    @classmethod
    def generate(cls) -> FileKek:
        """A fresh random key that lives in memory only (tests, or a KEK about to be written)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @property
    def key_id(self) -> str:
        return self._key_id

    async def wrap(self, data_key: bytes, aad: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data_key, _WRAP_LABEL + aad)

    async def unwrap(self, wrapped: bytes, aad: bytes) -> bytes:
        if len(wrapped) <= _NONCE_BYTES:
            raise DecryptionFailed("wrapped data key is truncated")
        try:
            return self._aead.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], _WRAP_LABEL + aad)
        except InvalidTag:
            raise DecryptionFailed("the wrapped data key did not authenticate") from None

    def __repr__(self) -> str:
        return f"FileKek(key_id={self._key_id!r})"


# -- the keyring ----------------------------------------------------------------------------------


class Keyring:
    """The current KEK and the previous ones, by ``key_id``. Shared by the vault service, the
    broker and the OAuth refresher, so a rotation is seen by all of them at once."""

    def __init__(self, current: KeyEncryptionKey, previous: Iterable[KeyEncryptionKey] = ()) -> None:
        self._current = current
        self._keys: dict[str, KeyEncryptionKey] = {k.key_id: k for k in previous}
        self._keys[current.key_id] = current

    @property
    def current(self) -> KeyEncryptionKey:
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def get(self, key_id: str) -> KeyEncryptionKey:
        try:
            return self._keys[key_id]
        except KeyError:
            raise UnknownKey(key_id) from None

    def promote(self, kek: KeyEncryptionKey) -> None:
        """Make ``kek`` current: new data keys are wrapped with it; the old current stays usable
        for unwrapping."""
        self._keys[kek.key_id] = kek
        self._current = kek

    def retire(self, key_id: str) -> None:
        """Forget a previous key (after rotation left no data key wrapped with it)."""
        if key_id == self._current.key_id:
            raise ValueError("the current key-encryption key cannot be retired")
        self._keys.pop(key_id, None)

    def __repr__(self) -> str:
        return f"Keyring(current={self._current.key_id!r}, keys={list(self._keys)!r})"
