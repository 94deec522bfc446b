"""``CredentialBroker``: the only place where a credential is decrypted for use.

The harness asks the broker for a *capability* for one credential (:meth:`CredentialBroker.issue`),
bound to the session and the harness's lease epoch, and hands it to the code that calls the
upstream (the control plane's MCP client), which redeems it for the secret right before the
request (:meth:`CredentialBroker.redeem`). Neither the harness loop nor the model ever holds the
secret; the capability alone is worth nothing to a harness that lost its lease.

``redeem`` checks, in this order (cheap checks first, no store read before the MAC is verified):

1. the token's MAC (``malformed`` / ``signature``);
2. its expiry (``expired``);
3. the requested upstream equals the capability's, after normalization (``upstream``);
4. the session's *current* lease exists, is live and has the capability's epoch (``fenced``): a
   zombie harness whose lease was taken over cannot use what it was given;
5. the session still exists, is not archived and still lists the vault; the vault and credential
   still exist, are not archived, and the credential is still bound to the same upstream
   (``revoked``);
6. for an ``environment_variable`` credential, the request host is one of its allowed hosts;

then decrypts (refreshing an ``mcp_oauth`` token first if due) and returns a
:class:`~control_plane.vault.material.SecretMaterial`. Every redemption is logged without the
secret or the token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from control_plane.errors import InvalidRequest, NotFound
from control_plane.store.base import Resource, Store
from control_plane.urls import normalize_url
from control_plane.vault.binding import host_allowed
from control_plane.vault.capability import Capability, CapabilitySigner
from control_plane.vault.cipher import PRIMARY_SECRET, CredentialCipher
from control_plane.vault.errors import CapabilityRejected, RejectReason
from control_plane.vault.material import SecretMaterial
from control_plane.vault.oauth import OAuthRefresher

__all__ = ["CredentialBroker", "CredentialRef"]

log = logging.getLogger(__name__)

_CREDENTIAL = "vault_credential"
_MCP_TYPES = frozenset({"static_bearer", "mcp_oauth"})


@dataclass(frozen=True, slots=True)
class CredentialRef:
    vault_id: str
    credential_id: str
    auth_type: str


class CredentialBroker:
    def __init__(
        self,
        store: Store,
        cipher: CredentialCipher,
        signer: CapabilitySigner,
        clock: Callable[[], datetime],
        *,
        refresher: OAuthRefresher | None = None,
        max_ttl_s: float = 300.0,
    ) -> None:
        self.store = store
        self.cipher = cipher
        self.signer = signer
        self.clock = clock
        self.refresher = refresher
        self.max_ttl_s = max_ttl_s

    # -- selection -------------------------------------------------------------------------------

    async def find_for_mcp(self, session_id: str, url: str) -> CredentialRef | None:
        """The credential for an MCP server URL among the session's vaults: the first vault in the
        session's ``vault_ids`` order holding an active ``static_bearer`` or ``mcp_oauth``
        credential whose server URL equals ``url`` after normalization; ``None`` if none does."""
        try:
            wanted = normalize_url(url)
        except InvalidRequest:
            return None
        session = await self.store.get_resource("session", session_id)
        for vault_id in session.body.get("vault_ids", []):
            try:
                vault = await self.store.get_resource("vault", vault_id)
            except NotFound:
                continue
            if vault.archived_at is not None:
                continue
            page = await self.store.list_resources(
                _CREDENTIAL, filters={"vault_id": vault_id, "upstream": wanted}, limit=20
            )
            for res in page.items:
                if res.body["auth"]["type"] in _MCP_TYPES:
                    return CredentialRef(vault_id, res.id, res.body["auth"]["type"])
        return None

    # -- capabilities ----------------------------------------------------------------------------

    async def issue(
        self, session_id: str, epoch: int, credential_ref: CredentialRef, ttl_s: float = 60.0
    ) -> Capability:
        """A capability to use one credential, for the holder of the session's lease at ``epoch``."""
        if not 0 < ttl_s <= self.max_ttl_s:
            raise ValueError(f"ttl_s must be in (0, {self.max_ttl_s}]")
        now = self.clock()
        await self._check_lease(session_id, epoch, now)
        credential = await self._check_live(session_id, credential_ref.vault_id, credential_ref.credential_id)
        return self.signer.sign(
            session_id=session_id,
            epoch=epoch,
            vault_id=credential_ref.vault_id,
            credential_id=credential_ref.credential_id,
            upstream=credential.body["upstream"],
            expires_at=now + timedelta(seconds=ttl_s),
        )

    async def redeem(self, capability: Capability | str, *, upstream: str) -> SecretMaterial:
        """The secret for one upstream request, if every check passes (``CapabilityRejected``)."""
        token = capability.token if isinstance(capability, Capability) else capability
        cap = self.signer.verify(token)
        now = self.clock()
        if now >= cap.expires_at:
            raise CapabilityRejected(RejectReason.EXPIRED)
        host_bound = cap.upstream.startswith("hosts:")
        if not host_bound and _normalized(upstream) != cap.upstream:
            raise CapabilityRejected(RejectReason.UPSTREAM)
        await self._check_lease(cap.session_id, cap.epoch, now)
        credential = await self._check_live(cap.session_id, cap.vault_id, cap.credential_id)
        auth = credential.body["auth"]
        if credential.body["upstream"] != cap.upstream:
            raise CapabilityRejected(RejectReason.REVOKED, "the credential's binding changed")
        if host_bound and not host_allowed(auth["networking"], _host(upstream)):
            raise CapabilityRejected(RejectReason.UPSTREAM)
        material = await self._open(credential)
        log.info(
            "credential %s used by session %s (epoch %d) for %s",
            cap.credential_id,
            cap.session_id,
            cap.epoch,
            _host(upstream) if host_bound else _without_query(cap.upstream),
        )
        return material

    async def mcp_headers(self, session_id: str, epoch: int, url: str) -> dict[str, str]:
        """``{"Authorization": "Bearer <token>"}`` for a request to the MCP server at ``url`` by the
        holder of the session's lease at ``epoch``, or ``{}`` when no credential matches: find,
        issue and redeem in one step, for an MCP client that asks per request. The returned value
        is a secret: send it, never log it."""
        ref = await self.find_for_mcp(session_id, url)
        if ref is None:
            return {}
        capability = await self.issue(session_id, epoch, ref, ttl_s=min(60.0, self.max_ttl_s))
        material = await self.redeem(capability, upstream=url)
        return {"Authorization": f"Bearer {material.reveal()}"}

    # -- checks ----------------------------------------------------------------------------------

    async def _check_lease(self, session_id: str, epoch: int, now: datetime) -> None:
        lease = await self.store.get_lease(session_id)
        if lease is None or lease.epoch != epoch or lease.expires_at <= now:
            raise CapabilityRejected(RejectReason.FENCED, f"session {session_id!r}")

    async def _check_live(self, session_id: str, vault_id: str, credential_id: str) -> Resource:
        try:
            session = await self.store.get_resource("session", session_id)
            vault = await self.store.get_resource("vault", vault_id)
            credential = await self.store.get_resource(_CREDENTIAL, credential_id)
        except NotFound as exc:
            raise CapabilityRejected(RejectReason.REVOKED, f"{exc.kind} {exc.id!r} not found") from None
        if vault_id not in session.body.get("vault_ids", []):
            raise CapabilityRejected(RejectReason.NOT_ALLOWED, f"vault {vault_id!r} is not the session's")
        if session.archived_at is not None:
            raise CapabilityRejected(RejectReason.REVOKED, f"session {session_id!r} is archived")
        if vault.archived_at is not None or credential.archived_at is not None:
            raise CapabilityRejected(RejectReason.REVOKED, "the vault or credential is archived")
        if credential.body.get("vault_id") != vault_id:
            raise CapabilityRejected(RejectReason.REVOKED, "the credential is not in that vault")
        return credential

    async def _open(self, credential: Resource) -> SecretMaterial:
        auth = credential.body["auth"]
        if auth["type"] == "mcp_oauth" and self.refresher is not None:
            return await self.refresher.get_token(credential)
        payload = await self.cipher.open(credential)
        return SecretMaterial(
            payload[PRIMARY_SECRET[auth["type"]]],
            vault_id=credential.body["vault_id"],
            credential_id=credential.id,
            auth_type=auth["type"],
            secret_name=auth.get("secret_name"),
        )


def _normalized(url: str) -> str | None:
    try:
        return normalize_url(url)
    except InvalidRequest:
        return None


def _without_query(url: str) -> str:
    """A URL fit for a log line: no query string (it may carry a key)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _host(upstream: str) -> str:
    """A bare host, or the host of a URL."""
    if "://" in upstream:
        return (urlsplit(upstream).hostname or "").lower()
    return upstream.strip().lower()
