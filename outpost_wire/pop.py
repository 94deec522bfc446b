"""Proof-of-possession (PoP) tokens: how an edge proves it holds its private key when TLS does not
carry its client certificate to the control plane (the WebSocket tunnel on the HTTP port).

A token is JWS-like and compact (ES256)::

    base64url(claims JSON) "." base64url(ECDSA P-256 / SHA-256 signature over the first part, DER)

    claims = {
      "v": 1, "typ": "outpost-pop",
      "edge_id": "edge_…",            # must be the edge the certificate names
      "aud": "outpost-tunnel:<sha256 hex of the control plane's CA certificate (DER)>",
      "iat": 1767225600, "exp": 1767225630,   # unix seconds; exp - iat <= 60
      "nonce": "<128 random bits, base64url>", # single use: the verifier keeps a replay cache
      "cert": "<the edge's client certificate, DER, base64>"
    }

The edge sends it as ``Authorization: Outpost-PoP <token>``. :func:`verify_token` checks the shape,
the audience, the times and the signature against the public key of the embedded certificate; the
caller then checks that certificate (issued by our CA, the edge's current one, not revoked, not
expired) and the nonce (:class:`NonceCache`). The audience binds a token to one control plane (its
CA), so a token captured by one deployment cannot be replayed at another.

Pure code: no clock reads (``now`` is passed in), no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from outpost_wire import jsonguard
from outpost_wire.errors import ErrorCode, OutpostError

__all__ = [
    "AUTH_SCHEME",
    "CLOCK_SKEW_S",
    "DEFAULT_TTL_S",
    "MAX_TOKEN_CHARS",
    "MAX_TTL_S",
    "NonceCache",
    "PopClaims",
    "PopError",
    "audience_for",
    "create_token",
    "nonce_key",
    "verify_token",
]

AUTH_SCHEME = "Outpost-PoP"  # Authorization: Outpost-PoP <token>
MAX_TTL_S = 60  # the verifier refuses tokens that claim to live longer
DEFAULT_TTL_S = 30
CLOCK_SKEW_S = 30  # tolerated difference between the edge's clock and ours
MAX_TOKEN_CHARS = 8192
_VERSION = 1
_TYPE = "outpost-pop"
_AUDIENCE_PREFIX = "outpost-tunnel:"


class PopError(OutpostError):
    """A PoP token is malformed, expired, replayed, for another audience, or badly signed.

    ``reason`` is one short word for logs and close messages (never the token itself)."""

    code = ErrorCode.UNAUTHENTICATED

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"proof of possession refused: {reason}" + (f" ({detail})" if detail else ""))
        self.reason = reason


@dataclass(frozen=True)
class PopClaims:
    """The verified content of a token. ``cert_der`` still has to be checked by the caller."""

    edge_id: str
    audience: str
    issued_at: int
    expires_at: int
    nonce: str
    cert_der: bytes


def audience_for(ca_cert_pem: bytes) -> str:
    """The audience of tokens meant for the control plane whose CA certificate is ``ca_cert_pem``."""
    ca = x509.load_pem_x509_certificate(ca_cert_pem)
    return _AUDIENCE_PREFIX + ca.fingerprint(hashes.SHA256()).hex()


def create_token(
    *,
    key_pem: bytes,
    cert_pem: bytes,
    edge_id: str,
    audience: str,
    now: float,
    ttl_s: int = DEFAULT_TTL_S,
    nonce: str | None = None,
) -> str:
    """A fresh token signed with the edge's EC private key (``key_pem``, unencrypted PEM)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PopError("unsupported_key", "the edge key must be an EC key")
    cert_der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    iat = int(now)
    claims = {
        "v": _VERSION,
        "typ": _TYPE,
        "edge_id": edge_id,
        "aud": audience,
        "iat": iat,
        "exp": iat + ttl_s,
        "nonce": nonce or _b64url(secrets.token_bytes(16)),
        "cert": base64.b64encode(cert_der).decode("ascii"),
    }
    payload = _b64url(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    signature = key.sign(payload.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    return f"{payload}.{_b64url(signature)}"


def verify_token(
    token: str,
    *,
    audience: str,
    now: float,
    max_ttl_s: int = MAX_TTL_S,
    skew_s: int = CLOCK_SKEW_S,
) -> PopClaims:
    """Check a token's shape, audience, lifetime and signature. Raises :class:`PopError`.

    Does not check the certificate's issuer or status, nor the nonce: the caller does."""
    if len(token) > MAX_TOKEN_CHARS:
        raise PopError("malformed", "token too long")
    payload, sep, sig_part = token.partition(".")
    if not sep or not payload or not sig_part:
        raise PopError("malformed", "expected <claims>.<signature>")
    try:
        claims = jsonguard.loads(_unb64url(payload), max_depth=4)
        signature = _unb64url(sig_part)
    except (ValueError, binascii.Error):  # UnicodeDecodeError and JsonTooDeep are ValueErrors
        raise PopError("malformed", "not base64url JSON") from None
    if not isinstance(claims, dict) or claims.get("v") != _VERSION or claims.get("typ") != _TYPE:
        raise PopError("malformed", "unknown token type or version")
    edge_id = _str(claims, "edge_id")
    aud = _str(claims, "aud")
    nonce = _str(claims, "nonce")
    iat = _int(claims, "iat")
    exp = _int(claims, "exp")
    try:
        cert_der = base64.b64decode(_str(claims, "cert"), validate=True)
        cert = x509.load_der_x509_certificate(cert_der)
    except (ValueError, binascii.Error):
        raise PopError("malformed", "embedded certificate is not valid DER") from None
    if not hmac.compare_digest(aud.encode(), audience.encode()):
        raise PopError("wrong_audience")
    if exp <= iat or exp - iat > max_ttl_s:
        raise PopError("bad_lifetime", f"tokens may live at most {max_ttl_s} s")
    if iat > now + skew_s:
        raise PopError("not_yet_valid", "issued in the future; check the edge's clock")
    if exp + skew_s <= now:
        raise PopError("expired")
    public_key = cert.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise PopError("unsupported_key", "the certificate's key must be an EC key")
    try:
        public_key.verify(signature, payload.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise PopError("bad_signature", "not signed by the certificate's key") from None
    return PopClaims(edge_id, aud, iat, exp, nonce, cert_der)


def nonce_key(claims: PopClaims) -> str:
    """What a replay cache remembers of a token: a digest of its edge and nonce."""
    return hashlib.sha256(f"{claims.edge_id}\0{claims.nonce}".encode()).hexdigest()


class NonceCache:
    """Remembers the nonces of accepted tokens until they could no longer be accepted anyway
    (``exp + skew``), so each token works once. Bounded: when full of live nonces, new tokens are
    refused (``busy``) rather than letting a flood evict entries and reopen replays."""

    def __init__(self, *, skew_s: int = CLOCK_SKEW_S, max_entries: int = 100_000) -> None:
        self._skew_s = skew_s
        self._max_entries = max_entries
        self._seen: dict[str, float] = {}  # digest of nonce -> when it may be forgotten

    def __len__(self) -> int:
        return len(self._seen)

    def use(self, claims: PopClaims, now: float) -> None:
        """Record the token's nonce; raises :class:`PopError` (``replayed``) if it was seen."""
        key = nonce_key(claims)
        if key in self._seen and self._seen[key] > now:
            raise PopError("replayed", "this token was used already")
        if len(self._seen) >= self._max_entries or len(self._seen) % 1024 == 1023:
            self._prune(now)
            if len(self._seen) >= self._max_entries:
                raise PopError("busy", "too many recent tokens; retry shortly")
        self._seen[key] = claims.expires_at + self._skew_s

    def _prune(self, now: float) -> None:
        for key in [k for k, until in self._seen.items() if until <= now]:
            del self._seen[key]


def _str(claims: dict[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise PopError("malformed", f"claim {name!r} missing")
    return value


def _int(claims: dict[str, Any], name: str) -> int:
    value = claims.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PopError("malformed", f"claim {name!r} missing")
    return value


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
