"""``Vault``: the vault's parts built over one store, keyring and clock.

``Vault.create(...)`` wires a :class:`VaultService` (the API's), a :class:`CredentialBroker` (the
harness's MCP client path) and an :class:`OAuthRefresher` (used by both) around one shared
:class:`CredentialCipher`, so a key rotation through the service is seen by all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import httpx

from control_plane.outbound import OutboundGuard
from control_plane.store.base import Store
from control_plane.vault.broker import CredentialBroker
from control_plane.vault.capability import CapabilitySigner
from control_plane.vault.keys import Keyring
from control_plane.vault.oauth import OAuthRefresher
from control_plane.vault.service import VaultService

__all__ = ["Vault"]


@dataclass(frozen=True)
class Vault:
    service: VaultService
    broker: CredentialBroker
    refresher: OAuthRefresher

    @classmethod
    def create(
        cls,
        store: Store,
        keyring: Keyring,
        signer: CapabilitySigner,
        http: httpx.AsyncClient,
        clock: Callable[[], datetime],
        *,
        outbound: OutboundGuard | None = None,
    ) -> Vault:
        """``http`` is the client for token endpoints (in production one made by
        ``outbound.http_client``, which dials only checked addresses); the caller owns (and
        closes) it. ``outbound``: the check of every URL a credential names, when it is stored
        and before each token request (default: no private networks)."""
        outbound = outbound or OutboundGuard()
        service = VaultService(store, keyring, clock, outbound=outbound)
        refresher = OAuthRefresher(store, service.cipher, http, clock, outbound=outbound)
        broker = CredentialBroker(store, service.cipher, signer, clock, refresher=refresher)
        return cls(service, broker, refresher)
