"""Enrollment and edge identity: join tokens in, client certificates out, peers checked.

The flow (two steps, as in kubeadm / Teleport join)::

    operator ── create_token(environment_id) ──► "oet_…"  (single use, expires; stored as sha256 only)
    edge     ── enroll(token, csr, name) ──────► certificate for a key the edge generated and keeps
    tunnel   ── authenticate_peer(cert_der) ───► EdgeRecord, or EdgeAuthError(reason)
    edge     ── renew(pop_token, csr) ─────────► a new certificate for the same edge (see below)
    operator ── revoke(edge_id) ───────────────► listeners told, so live tunnels can be cut

Renewal (as kubelet rotates its client certificate): the edge proves it holds its current key with
a proof-of-possession token (:mod:`outpost_wire.pop`, audience :func:`renewal_audience`, distinct
from the tunnel's so that a tunnel token cannot be turned into a certificate) and sends a CSR for a
new key. The new certificate names the same edge and environment; the store keeps the certificate
the edge renewed from as its *previous* one, accepted (by ``authenticate_peer`` and ``renew``)
until the edge first authenticates with the new one or the previous one expires, so an edge that
lost the answer (crashed before saving it) still gets in with what it holds and renews again.

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
from control_plane.enroll.nonces import SharedNonces
from control_plane.errors import Conflict, ControlPlaneError, InvalidRequest, NotFound, TokenRejected
from control_plane.store.base import EdgeRecord, EnrollmentTokenRecord, Store
from outpost_wire.admission import refusal_message
from outpost_wire.errors import ErrorCode
from outpost_wire.pop import AUTH_SCHEME, PopError, verify_token
from outpost_wire.throttle import LogThrottle

__all__ = [
    "MAX_TOKEN_TTL_S",
    "RENEW_AUDIENCE_PREFIX",
    "TOKEN_PREFIX",
    "EdgeAuthError",
    "EdgeAuthReason",
    "EnrolledEdge",
    "EnrollmentService",
    "IssuedToken",
    "RenewedEdge",
    "RevocationListener",
    "hash_token",
    "renewal_audience",
]

logger = logging.getLogger(__name__)
# Anyone who can reach the API or the tunnel port can cause these: a few lines a minute per kind.
_refusals = LogThrottle(logger)

TOKEN_PREFIX = "oet_"  # noqa: S105  (a prefix, not a secret)
MAX_TOKEN_TTL_S = 7 * 24 * 3600.0
MAX_EDGE_NAME_CHARS = 128
#: Audience prefix of the proof-of-possession tokens that renew a certificate; the edge uses the
#: same text (kept in step by hand: edge_agent.renew).
RENEW_AUDIENCE_PREFIX = "outpost-renew:"

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
        super().__init__(refusal_message(reason))  # the edge reads the reason back from these words
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


@dataclass(frozen=True, slots=True)
class RenewedEdge:
    """What a successful renewal returns to the edge."""

    edge_id: str
    environment_id: str
    certificate_pem: bytes
    ca_certificate_pem: bytes
    not_after: datetime


def renewal_audience(ca_fingerprint_sha256: str) -> str:
    """The audience of renewal tokens for the control plane whose CA has this sha256 (hex)."""
    return RENEW_AUDIENCE_PREFIX + ca_fingerprint_sha256


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
        self._renew_nonces = SharedNonces(store)  # a token renews once, on any process
        self._renew_audience = renewal_audience(ca.fingerprint_sha256)

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

    async def list_tokens(self, environment_id: str | None = None) -> list[EnrollmentTokenRecord]:
        """Every enrollment token (of one environment), oldest first; records hold hashes only."""
        return await self._store.list_enrollment_tokens(environment_id)

    async def revoke_token(self, token_id: str) -> EnrollmentTokenRecord:
        """Withdraw an unused token: from now on it enrolls nothing (``TokenRejected`` with reason
        ``revoked``). ``NotFound`` if unknown, ``Conflict`` if it was used (revoke the edge)."""
        record = await self._store.revoke_enrollment_token(token_id, self._clock())
        logger.info("revoked enrollment token %s of environment %s", token_id, record.environment_id)
        return record

    # -- enrollment -----------------------------------------------------------------------------
    async def enroll(self, token: str, csr_pem: bytes, name: str) -> EnrolledEdge:
        """Exchange ``token`` for a client certificate over the key in ``csr_pem``.

        The CSR and name are checked before the token is consumed, so a malformed request does not
        burn it. Raises ``TokenRejected`` (reason ``unknown``/``revoked``/``used``/``expired``) and
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
            _refusals.warning(
                f"token:{exc.reason}",
                "enrollment token rejected (%s): sha256 prefix %s",
                exc.reason,
                token_hash[:12],
            )
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
        store knows: the edge exists, this is the certificate we issued to it (its current one, or
        the previous one it renewed from while that is still accepted), it is not revoked and not
        expired. Raises :class:`EdgeAuthError` with the reason otherwise. The first time an edge
        authenticates with its current certificate after a renewal, the previous one is forgotten.
        """
        edge, _ = await self._authenticate(cert_der)
        return edge

    async def _authenticate(self, cert_der: bytes, *, what: str = "tunnel peer") -> tuple[EdgeRecord, str]:
        """``(edge, fingerprint of the certificate it authenticated with)``."""
        try:
            cert = x509.load_der_x509_certificate(cert_der)
        except ValueError:
            raise self._reject("malformed_certificate", what=what) from None
        if not self._ca.verify_issued_by_us(cert):
            raise self._reject("untrusted_issuer", what=what)
        if not _is_client_cert(cert):
            raise self._reject("wrong_purpose", what=what)
        try:
            edge_id = edge_id_from_cert(cert)
            environment_id = environment_id_from_cert(cert)
        except InvalidRequest:
            raise self._reject("malformed_certificate", what=what) from None
        try:
            edge = await self._store.get_edge(edge_id)
        except NotFound:
            raise self._reject("unknown_edge", edge_id, what=what) from None
        fingerprint = cert.fingerprint(hashes.SHA256()).hex()
        previous = edge.previous_cert_fingerprint
        is_current = hmac.compare_digest(fingerprint, edge.cert_fingerprint)
        is_previous = previous is not None and hmac.compare_digest(fingerprint, previous)
        if not (is_current or is_previous) or environment_id != edge.environment_id:
            raise self._reject("certificate_mismatch", edge_id, what=what)
        if edge.revoked_at is not None:
            raise self._reject("revoked", edge_id, what=what)
        now = self._clock()
        recorded_not_after = edge.cert_not_after if is_current else edge.previous_cert_not_after
        if previous is not None and (is_current or _passed(edge.previous_cert_not_after, now)):
            # The edge has the new certificate in hand, or the old one is past use: stop
            # accepting the old one.
            edge = await self._store.forget_previous_edge_certificate(edge.id, edge.cert_fingerprint)
            if is_current:
                logger.info(
                    "edge %s authenticated with its renewed certificate (serial %s); "
                    "its previous certificate is no longer accepted",
                    edge.id,
                    edge.cert_serial,
                )
        if recorded_not_after is None or now >= min(cert.not_valid_after_utc, recorded_not_after):
            raise self._reject("expired", edge_id, what=what)
        if now < cert.not_valid_before_utc:
            raise self._reject("not_yet_valid", edge_id, what=what)
        if is_previous:
            logger.info(
                "edge %s authenticated with the certificate it renewed from "
                "(it has not used its renewed one yet)",
                edge.id,
            )
        return edge, fingerprint

    # -- renewal --------------------------------------------------------------------------------
    async def renew(self, token: str | None, csr_pem: bytes) -> RenewedEdge:
        """Issue a new certificate for the edge that signed ``token`` (a proof-of-possession token
        for :func:`renewal_audience`, made with its current or previous certificate) over the key
        in ``csr_pem``; same edge id, same environment, ``cert_valid_days`` of validity.

        Raises :class:`~outpost_wire.pop.PopError` (bad, replayed or missing token) and
        :class:`EdgeAuthError` (the certificate in it no longer authenticates the edge) before the
        CSR is looked at, then ``InvalidRequest`` for a bad CSR. Never logs the token.
        """
        if not token:
            raise self._refuse_renewal(
                PopError("missing", f"expected an 'Authorization: {AUTH_SCHEME} <token>' header")
            )
        now = self._clock()
        try:
            claims = verify_token(token, audience=self._renew_audience, now=now.timestamp())
        except PopError as exc:
            raise self._refuse_renewal(exc) from None
        edge, renewed_from = await self._authenticate(claims.cert_der, what="certificate renewal")
        if edge.id != claims.edge_id:
            raise self._refuse_renewal(
                PopError("edge_mismatch", "the token names another edge than its certificate"), edge.id
            )
        try:
            await self._renew_nonces.use(claims, now.timestamp())
        except PopError as exc:
            raise self._refuse_renewal(exc, edge.id) from None
        try:
            cert = self._ca.sign_edge_csr(
                csr_pem, edge.id, edge.environment_id, valid_days=self._cert_valid_days, now=now
            )
        except InvalidRequest as exc:
            logger.warning("certificate renewal of edge %s refused: bad CSR (%s)", edge.id, exc)
            raise
        try:
            record = await self._store.renew_edge_certificate(
                edge.id,
                format(cert.serial_number, "x"),
                cert.fingerprint(hashes.SHA256()).hex(),
                cert.not_valid_after_utc,
                now,
                renewed_from=renewed_from,
            )
        except Conflict:  # revoked, or another renewal of this edge won the race
            current = await self._store.get_edge(edge.id)
            reason: EdgeAuthReason = "revoked" if current.revoked_at is not None else "certificate_mismatch"
            raise self._reject(reason, edge.id, what="certificate renewal") from None
        logger.info(
            "renewed the certificate of edge %s (environment %s): serial %s, valid until %s; "
            "the previous one stays accepted until the edge uses the new one",
            record.id,
            record.environment_id,
            record.cert_serial,
            record.cert_not_after.isoformat(),
        )
        return RenewedEdge(
            edge_id=record.id,
            environment_id=record.environment_id,
            certificate_pem=cert.public_bytes(serialization.Encoding.PEM),
            ca_certificate_pem=self._ca.ca_cert_pem,
            not_after=record.cert_not_after,
        )

    @staticmethod
    def _refuse_renewal(exc: PopError, edge_id: str | None = None) -> PopError:
        _refusals.warning(
            f"renewal:{exc.reason}",
            "certificate renewal refused: %s (edge %s)",
            exc.reason,
            edge_id or "unknown",
        )
        return exc

    @staticmethod
    def _reject(
        reason: EdgeAuthReason, edge_id: str | None = None, *, what: str = "tunnel peer"
    ) -> EdgeAuthError:
        _refusals.warning(f"{what}:{reason}", "%s refused: %s (edge %s)", what, reason, edge_id or "unknown")
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


def _passed(moment: datetime | None, now: datetime) -> bool:
    return moment is not None and now >= moment


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
