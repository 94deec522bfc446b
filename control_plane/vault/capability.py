"""Capability tokens: short-lived, HMAC-SHA256-signed grants to use one credential for one session.

Token: ``ocap1.<payload>.<mac>``, both parts unpadded URL-safe base64; ``payload`` is compact JSON::

    {"sid": session id, "ep": lease epoch, "vid": vault id, "cid": credential id,
     "up": upstream (normalized URL or "hosts:..."), "exp": expiry (unix seconds), "jti": random}

and ``mac = HMAC-SHA256(signing key, "ocap1." + payload)``. The signing key is the broker's own
(32 random bytes in a 0600 file), unrelated to the key-encryption keys: a forged or altered token
fails the constant-time MAC comparison before any store read. The token is a bearer grant, so it is
never logged; it is also useless on its own: the broker checks the session's *current* lease epoch
on every redemption.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from control_plane.vault.errors import CapabilityRejected, KeyFileError, RejectReason
from control_plane.vault.keys import KEY_BYTES, load_or_create_key_file, read_key_file

__all__ = ["Capability", "CapabilitySigner"]

_PREFIX = "ocap1."
_MAX_TOKEN_CHARS = 8192


@dataclass(frozen=True, slots=True, repr=False)
class Capability:
    """A signed grant. Only ``token`` is trusted by the broker; the other fields are its decoded
    claims, for the caller's convenience."""

    token: str
    session_id: str
    epoch: int
    vault_id: str
    credential_id: str
    upstream: str
    expires_at: datetime
    jti: str

    def __repr__(self) -> str:  # the token is a bearer grant: never shown
        return (
            f"Capability(session_id={self.session_id!r}, epoch={self.epoch}, vault_id={self.vault_id!r}, "
            f"credential_id={self.credential_id!r}, upstream={self.upstream!r}, "
            f"expires_at={self.expires_at.isoformat()!r})"
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CapabilitySigner:
    """Signs and verifies capability tokens with one HMAC key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise KeyFileError(f"a capability signing key is {KEY_BYTES} bytes, not {len(key)}")
        self._key = key

    @classmethod
    def load(cls, path: Path) -> CapabilitySigner:
        return cls(read_key_file(path))

    @classmethod
    def load_or_create(cls, path: Path) -> CapabilitySigner:
        return cls(load_or_create_key_file(path))

    @classmethod
    def generate(cls) -> CapabilitySigner:
        return cls(secrets.token_bytes(KEY_BYTES))

    def _mac(self, signed: str) -> bytes:
        return hmac.new(self._key, signed.encode("ascii"), hashlib.sha256).digest()

    def sign(
        self,
        *,
        session_id: str,
        epoch: int,
        vault_id: str,
        credential_id: str,
        upstream: str,
        expires_at: datetime,
    ) -> Capability:
        jti = secrets.token_hex(12)
        expiry = int(expires_at.timestamp())
        claims = {
            "sid": session_id,
            "ep": epoch,
            "vid": vault_id,
            "cid": credential_id,
            "up": upstream,
            "exp": expiry,
            "jti": jti,
        }
        signed = _PREFIX + _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        token = f"{signed}.{_b64(self._mac(signed))}"
        expires = datetime.fromtimestamp(expiry, UTC)
        return Capability(token, session_id, epoch, vault_id, credential_id, upstream, expires, jti)

    def verify(self, token: str) -> Capability:
        """The capability, if ``token`` is well-formed and its MAC is ours. Expiry and everything
        else are the broker's to check. Raises ``CapabilityRejected`` (``malformed``/``signature``)."""
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS or not token.startswith(_PREFIX):
            raise CapabilityRejected(RejectReason.MALFORMED)
        signed, sep, mac_text = token.rpartition(".")
        if not sep or signed == _PREFIX[:-1]:
            raise CapabilityRejected(RejectReason.MALFORMED)
        try:
            mac = _unb64(mac_text)
        except (binascii.Error, ValueError):
            raise CapabilityRejected(RejectReason.MALFORMED) from None
        if not hmac.compare_digest(mac, self._mac(signed)):
            raise CapabilityRejected(RejectReason.SIGNATURE)
        try:
            claims: Any = json.loads(_unb64(signed[len(_PREFIX) :]))
            capability = Capability(
                token,
                _str(claims["sid"]),
                _int(claims["ep"]),
                _str(claims["vid"]),
                _str(claims["cid"]),
                _str(claims["up"]),
                datetime.fromtimestamp(_int(claims["exp"]), UTC),
                _str(claims["jti"]),
            )
        except (binascii.Error, ValueError, TypeError, KeyError, OverflowError, OSError):
            raise CapabilityRejected(RejectReason.MALFORMED) from None
        return capability

    def __repr__(self) -> str:
        return "CapabilitySigner(<key hidden>)"


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError
    return value
