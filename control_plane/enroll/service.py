"""Enrollment and edge identity: join tokens in, client certificates out, peers checked.

The flow (two steps, as in kubeadm / Teleport join)::

    operator ── create_token(environment_id) ──► "oet_…"  (single use, expires; stored as sha256 only)
    edge     ── enroll(token, csr, name) ──────► certificate for a key the edge generated and keeps
    tunnel   ── authenticate_peer(cert_der) ───► EdgeRecord, or EdgeAuthError(reason)
    operator ── revoke(edge_id) ───────────────► listeners told, so live tunnels can be cut

Token values are never logged or stored: logs carry the first 12 hex digits of their sha256.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from control_plane.enroll.ca import (
    CertificateAuthority,
    edge_id_from_cert,
    environment_id_from_cert,
    load_csr,
)
from control_plane.errors import ControlPlaneError, InvalidRequest, NotFound, TokenRejected
from control_plane.store.base import EdgeRecord, EnrollmentTokenRecord, Store
from outpost_wire.errors import ErrorCode

__all__ = [
    "MAX_TOKEN_TTL_S",
    "TOKEN_PREFIX",
    "EdgeAuthError",
    "EdgeAuthReason",
    "EnrolledEdge",
    "EnrollmentService",
    "IssuedToken",
    "RevocationListener",
    "hash_token",
]

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "oet_"  # noqa: S105  (a prefix, not a secret)
MAX_TOKEN_TTL_S = 7 * 24 * 3600.0
MAX_EDGE_NAME_CHARS = 128

EdgeAuthReason = Literal[
    "malformed_certificate",  # not DER, or no outpost edge/environment id in it
    "untrusted_issuer",  # not signed by our CA
    "wrong_purpose",  # no clientAuth EKU, or a CA certificate
    "unknown_edge",  # no such edge in the store
    "certificate_mismatch",  # the edge exists but this is not the certificate we issued to it
    "revoked",
    "expired",
    "not_yet_valid",
]

RevocationListener = Callable[[str], Awaitable[None] | None]
"""Called with the edge id after an edge is revoked; may be a coroutine function."""


class EdgeAuthError(ControlPlaneError):
    """A tunnel peer's certificate does not authenticate an active edge (``.reason``)."""

    code = ErrorCode.UNAUTHENTICATED

    def __init__(self, reason: EdgeAuthReason, edge_id: str | None = None) -> None:
        super().__init__(f"edge authentication failed: {reason}")
        self.reason: EdgeAuthReason = reason
        self.edge_id = edge_id


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new enrollment token. ``token`` is shown to the operator once and never stored."""

    token: str = field(repr=False)
    token_id: str
    environment_id: str
    expires_at: datetime
    ca_fingerprint: str  # sha256 hex of the CA certificate: the edge pins it at registration


@dataclass(frozen=True, slots=True)
class EnrolledEdge:
    """What a successful enrollment returns to the edge."""

    edge_id: str
    environment_id: str
    certificate_pem: bytes
    ca_certificate_pem: bytes


def hash_token(token: str) -> str:
    """sha256 hex of a token: the only form in which tokens are stored or compared."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _utcnow() -> datetime:
    return datetime.now(UTC)


class EnrollmentService:
    """Issues enrollment tokens, enrolls edges, authenticates tunnel peers and revokes edges."""

    def __init__(
        self,
        store: Store,
        ca: CertificateAuthority,
        *,
        clock: Callable[[], datetime] = _utcnow,
        cert_valid_days: int = 365,
    ) -> None:
        self._store = store
        self._ca = ca
        self._clock = clock
        self._cert_valid_days = cert_valid_days
        self._listeners: list[RevocationListener] = []

    @property
    def ca(self) -> CertificateAuthority:
        """The CA that signs edge certificates."""
        return self._ca

    # -- tokens ---------------------------------------------------------------------------------
    async def create_token(self, environment_id: str, *, ttl_s: float = 3600) -> IssuedToken:
        """Issue a single-use token that enrolls one edge into ``environment_id``.

        Raises ``NotFound`` for an unknown environment and ``InvalidRequest`` for an archived one
        or a ``ttl_s`` outside ``(0, MAX_TOKEN_TTL_S]``.
        """
        if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
            raise InvalidRequest(
                f"ttl must be more than 0 and at most {MAX_TOKEN_TTL_S:.0f} s", "ttl_seconds"
            )
        environment = await self._store.get_resource("environment", environment_id)
        if environment.archived_at is not None:
            raise InvalidRequest(f"environment {environment_id!r} is archived", param="environment_id")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        record = EnrollmentTokenRecord(
            id="etok_" + secrets.token_hex(12),
            environment_id=environment_id,
            token_hash=hash_token(token),
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
        )
        await self._store.create_enrollment_token(record)
        logger.info(
            "created enrollment token %s for environment %s, expires %s",
            record.id,
            environment_id,
            record.expires_at.isoformat(),
        )
        return IssuedToken(
            token=token,
            token_id=record.id,
            environment_id=environment_id,
            expires_at=record.expires_at,
            ca_fingerprint=self._ca.fingerprint_sha256,
        )

    # -- enrollment -----------------------------------------------------------------------------
    async def enroll(self, token: str, csr_pem: bytes, name: str) -> EnrolledEdge:
        """Exchange ``token`` for a client certificate over the key in ``csr_pem``.

        The CSR and name are checked before the token is consumed, so a malformed request does not
        burn it. Raises ``TokenRejected`` (reason ``unknown``/``expired``/``used``) and
        ``InvalidRequest`` (bad CSR or name, archived environment).
        """
        _check_name(name)
        load_csr(csr_pem)  # raises InvalidRequest before the token is spent
        token_hash = hash_token(token)
        edge_id = "edge_" + secrets.token_hex(12)
        now = self._clock()
        try:
            token_record = await self._store.consume_enrollment_token(token_hash, edge_id, now)
        except TokenRejected as exc:
            logger.warning("enrollment token rejected (%s): sha256 prefix %s", exc.reason, token_hash[:12])
            raise
        environment_id = token_record.environment_id
        try:
            environment = await self._store.get_resource("environment", environment_id)
        except NotFound:
            raise InvalidRequest(f"environment {environment_id!r} no longer exists") from None
        if environment.archived_at is not None:
            raise InvalidRequest(f"environment {environment_id!r} is archived", param="environment_id")
        cert = self._ca.sign_edge_csr(
            csr_pem, edge_id, environment_id, valid_days=self._cert_valid_days, now=now
        )
        record = EdgeRecord(
            id=edge_id,
            environment_id=environment_id,
            name=name,
            cert_serial=format(cert.serial_number, "x"),
            cert_fingerprint=cert.fingerprint(hashes.SHA256()).hex(),
            created_at=now,
            cert_not_after=cert.not_valid_after_utc,
        )
        await self._store.create_edge(record)
        logger.info(
            "enrolled edge %s (%r) into environment %s with token %s",
            edge_id,
            name,
            environment_id,
            token_record.id,
        )
        return EnrolledEdge(
            edge_id=edge_id,
            environment_id=environment_id,
            certificate_pem=cert.public_bytes(serialization.Encoding.PEM),
            ca_certificate_pem=self._ca.ca_cert_pem,
        )

    # -- tunnel peers ---------------------------------------------------------------------------
    async def authenticate_peer(self, cert_der: bytes) -> EdgeRecord:
        """The active edge that ``cert_der`` (the TLS peer's leaf certificate) belongs to.

        Checks again what the TLS layer should already have checked (issuer), then what only the
        store knows: the edge exists, this is the certificate we issued to it, it is not revoked and
        not expired. Raises :class:`EdgeAuthError` with the reason otherwise.
        """
        try:
            cert = x509.load_der_x509_certificate(cert_der)
        except ValueError:
            raise self._reject("malformed_certificate") from None
        if not self._ca.verify_issued_by_us(cert):
            raise self._reject("untrusted_issuer")
        if not _is_client_cert(cert):
            raise self._reject("wrong_purpose")
        try:
            edge_id = edge_id_from_cert(cert)
            environment_id = environment_id_from_cert(cert)
        except InvalidRequest:
            raise self._reject("malformed_certificate") from None
        try:
            edge = await self._store.get_edge(edge_id)
        except NotFound:
            raise self._reject("unknown_edge", edge_id) from None
        fingerprint = cert.fingerprint(hashes.SHA256()).hex()
        if (
            not hmac.compare_digest(fingerprint, edge.cert_fingerprint)
            or environment_id != edge.environment_id
        ):
            raise self._reject("certificate_mismatch", edge_id)
        if edge.revoked_at is not None:
            raise self._reject("revoked", edge_id)
        now = self._clock()
        if now >= min(cert.not_valid_after_utc, edge.cert_not_after):
            raise self._reject("expired", edge_id)
        if now < cert.not_valid_before_utc:
            raise self._reject("not_yet_valid", edge_id)
        return edge

    @staticmethod
    def _reject(reason: EdgeAuthReason, edge_id: str | None = None) -> EdgeAuthError:
        logger.warning("tunnel peer refused: %s (edge %s)", reason, edge_id or "unknown")
        return EdgeAuthError(reason, edge_id)

    # -- edges ----------------------------------------------------------------------------------
    async def get_edge(self, edge_id: str) -> EdgeRecord:
        """One edge; ``NotFound`` if there is none."""
        return await self._store.get_edge(edge_id)

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]:
        """Every edge, or those of one environment."""
        return await self._store.list_edges(environment_id)

    async def revoke(self, edge_id: str) -> EdgeRecord:
        """Revoke ``edge_id`` (``NotFound`` if unknown) and tell the revocation listeners.

        The revocation is durable before any listener runs; a failing listener is logged and does
        not undo it or stop the others. Listeners run on every call, also for an edge that was
        already revoked, so a retry cuts a connection that a failed listener left open.
        """
        record = await self._store.revoke_edge(edge_id, self._clock())
        logger.info("revoked edge %s of environment %s", edge_id, record.environment_id)
        for listener in list(self._listeners):
            try:
                result = listener(edge_id)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("revocation listener %r failed for edge %s", listener, edge_id)
        return record

    def add_revocation_listener(self, callback: RevocationListener) -> Callable[[], None]:
        """Call ``callback(edge_id)`` after every revocation in this process. Returns a function
        that removes it again (idempotent)."""
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove


def _check_name(name: str) -> None:
    if not name.strip() or len(name) > MAX_EDGE_NAME_CHARS or not name.isprintable():
        raise InvalidRequest(f"name must be 1-{MAX_EDGE_NAME_CHARS} printable characters", param="name")


def _is_client_cert(cert: x509.Certificate) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return not constraints.ca and x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usage
