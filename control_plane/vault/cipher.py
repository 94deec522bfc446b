"""The sealed part of a stored credential: which fields are secret, and how they are sealed.

A credential's secret fields (table below) are serialized together as one JSON object and sealed
(``crypto.seal``) with the row's associated data (``binding.credential_aad``). Everything else in
the stored body is public and is what the API returns.

==================== ==============================================
``auth.type``        secret payload fields
==================== ==============================================
static_bearer        ``token``
mcp_oauth            ``access_token``, ``refresh_token``?, ``client_secret``?
environment_variable ``secret_value``
==================== ==============================================

Only the vault package opens payloads: the broker (for a capability), the OAuth refresher (to
refresh), and the service (to merge an update or re-bind a changed networking scope).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from control_plane.store.base import Resource
from control_plane.vault.binding import credential_aad
from control_plane.vault.crypto import SealedSecret, rewrap, seal, unseal
from control_plane.vault.errors import DecryptionFailed
from control_plane.vault.keys import KeyEncryptionKey, Keyring

__all__ = ["PRIMARY_SECRET", "CredentialCipher"]

PRIMARY_SECRET = {
    "static_bearer": "token",
    "mcp_oauth": "access_token",
    "environment_variable": "secret_value",
}
"""The field of the payload that is *used* (sent upstream) for each auth type."""


class CredentialCipher:
    """Seals and opens credential payloads with a shared :class:`Keyring`."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring

    async def seal(
        self, vault_id: str, credential_id: str, auth: Mapping[str, Any], payload: Mapping[str, str]
    ) -> dict[str, str]:
        """The stored JSON of ``payload`` sealed for this row, with a fresh data key."""
        plaintext = json.dumps(dict(payload), separators=(",", ":")).encode()
        aad = credential_aad(vault_id, credential_id, auth)
        return (await seal(plaintext, aad, self.keyring.current)).to_json()

    async def open(self, res: Resource) -> dict[str, str]:
        """The payload of a stored credential. ``DecryptionFailed`` if it does not authenticate
        for this row, or if it was purged (archived credential)."""
        sealed = res.body.get("sealed")
        if not sealed:
            raise DecryptionFailed(f"credential {res.id!r} holds no secret (archived)")
        aad = credential_aad(res.body["vault_id"], res.id, res.body["auth"])
        plaintext = await unseal(SealedSecret.from_json(sealed), aad, self.keyring)
        try:
            payload = json.loads(plaintext)
        except ValueError:
            raise DecryptionFailed("the sealed payload is not JSON") from None
        if not isinstance(payload, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in payload.items()
        ):
            raise DecryptionFailed("the sealed payload is not an object of strings")
        return payload

    async def rewrap(self, res: Resource, new_kek: KeyEncryptionKey) -> dict[str, str] | None:
        """The row's sealed JSON with its data key wrapped by ``new_kek``; ``None`` when there is
        nothing to do (no secret, or already wrapped by ``new_kek``)."""
        sealed = res.body.get("sealed")
        if not sealed or sealed.get("key_id") == new_kek.key_id:
            return None
        aad = credential_aad(res.body["vault_id"], res.id, res.body["auth"])
        return (await rewrap(SealedSecret.from_json(sealed), aad, self.keyring, new_kek)).to_json()
