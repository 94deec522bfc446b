"""Envelope encryption of one secret payload.

``seal``: a fresh random 256-bit data key (DEK) per call encrypts the payload with AES-256-GCM under
a random 96-bit nonce; the DEK is then wrapped by the keyring's current key-encryption key. Both
the payload and the wrap carry the same associated data (``binding.credential_aad``), so the
ciphertext is bound to its row. A fresh DEK per seal means a (key, nonce) pair is never reused.

``rewrap`` moves a sealed secret to another KEK by unwrapping and wrapping the DEK only: the
payload ciphertext is not touched and the plaintext is never produced (rotation).

Stored form (``SealedSecret.to_json``)::

    {"key_id": "kek_...", "wrapped_dek": <b64>, "nonce": <b64>, "ciphertext": <b64>}
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from control_plane.vault.errors import DecryptionFailed
from control_plane.vault.keys import KEY_BYTES, KeyEncryptionKey, Keyring

__all__ = ["SealedSecret", "rewrap", "seal", "unseal"]

_NONCE_BYTES = 12
_PAYLOAD_LABEL = b"outpost-vault-payload-v1\x00"


@dataclass(frozen=True, slots=True)
class SealedSecret:
    key_id: str  # the KEK that wrapped the data key
    wrapped_dek: bytes
    nonce: bytes
    ciphertext: bytes  # AES-GCM ciphertext and tag of the payload

    def to_json(self) -> dict[str, str]:
        return {
            "key_id": self.key_id,
            "wrapped_dek": _b64(self.wrapped_dek),
            "nonce": _b64(self.nonce),
            "ciphertext": _b64(self.ciphertext),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SealedSecret:
        try:
            key_id = obj["key_id"]
            if not isinstance(key_id, str):
                raise TypeError
            return cls(key_id, _unb64(obj["wrapped_dek"]), _unb64(obj["nonce"]), _unb64(obj["ciphertext"]))
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise DecryptionFailed("the sealed secret is malformed") from None

    def __repr__(self) -> str:
        return f"SealedSecret(key_id={self.key_id!r}, ciphertext_bytes={len(self.ciphertext)})"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object) -> bytes:
    if not isinstance(value, str):
        raise TypeError
    return base64.b64decode(value, validate=True)


async def seal(plaintext: bytes, aad: bytes, kek: KeyEncryptionKey) -> SealedSecret:
    """Encrypt ``plaintext`` under a fresh data key wrapped by ``kek``."""
    dek = AESGCM.generate_key(bit_length=KEY_BYTES * 8)
    nonce = secrets.token_bytes(_NONCE_BYTES)
    ciphertext = AESGCM(dek).encrypt(nonce, plaintext, _PAYLOAD_LABEL + aad)
    wrapped = await kek.wrap(dek, aad)
    return SealedSecret(kek.key_id, wrapped, nonce, ciphertext)


async def unseal(sealed: SealedSecret, aad: bytes, keyring: Keyring) -> bytes:
    """The plaintext; ``DecryptionFailed`` (``UnknownKey``) if anything does not authenticate."""
    dek = await keyring.get(sealed.key_id).unwrap(sealed.wrapped_dek, aad)
    if len(dek) != KEY_BYTES or len(sealed.nonce) != _NONCE_BYTES:
        raise DecryptionFailed("the sealed secret is malformed")
    try:
        return AESGCM(dek).decrypt(sealed.nonce, sealed.ciphertext, _PAYLOAD_LABEL + aad)
    except InvalidTag:
        raise DecryptionFailed("the sealed secret did not authenticate") from None


async def rewrap(
    sealed: SealedSecret, aad: bytes, keyring: Keyring, new_kek: KeyEncryptionKey
) -> SealedSecret:
    """The same ciphertext with its data key wrapped by ``new_kek`` (unchanged if already so)."""
    if sealed.key_id == new_kek.key_id:
        return sealed
    dek = await keyring.get(sealed.key_id).unwrap(sealed.wrapped_dek, aad)
    return SealedSecret(new_kek.key_id, await new_kek.wrap(dek, aad), sealed.nonce, sealed.ciphertext)
