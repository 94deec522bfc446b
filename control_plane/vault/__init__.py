"""The vault: credentials for the upstreams the control plane calls itself (MCP servers), stored
write-only and envelope-encrypted, decrypted only inside a broker for one session's lease.

Threat model
============

Assets: the secret fields of credentials (``token``, ``access_token``, ``refresh_token``,
``client_secret``, ``secret_value``).

What we defend against, and how:

* **Reading the database** (a copied SQLite file, a backup, a replica, SQL injection elsewhere).
  Secrets are sealed with AES-256-GCM under a fresh data key per seal; the data key is wrapped by a
  key-encryption key (KEK) that is *not* in the database (a 0600 key file outside it, or later a
  KMS). The database alone yields nothing.
* **Writing the database** (moving ciphertexts between rows, or re-pointing a credential at an
  attacker's server). Both the payload and the wrapped key carry associated data made of the vault
  id, credential id, auth type and *binding* (normalized MCP server URL and token endpoint, or the
  canonical allowed hosts): a ciphertext copied to another row, or a row whose URL was edited,
  fails to decrypt instead of sending the secret somewhere else.
* **The API**: it is write-only. Responses carry public fields only (built from an allow-list per
  auth type); request models hold secrets as ``SecretStr``; validation errors never echo input.
* **Logs, events, tracebacks**: secrets are never logged; the decrypted form is
  :class:`SecretMaterial`, whose ``repr``/``str`` hide the value and which refuses to be pickled;
  error bodies of token endpoints are scrubbed before they reach the API.
* **The harness and the model**: they never see plaintext. The harness gets a short-lived
  capability (HMAC-signed: session, lease epoch, vault, credential, upstream, expiry) and only the
  upstream call path redeems it. Redemption re-checks the session's *current* lease epoch, so a
  zombie harness (lease taken over) holds a useless capability; it also re-checks that nothing
  was archived or re-bound since issue, and that the request goes to the bound upstream.
* **Archived credentials**: archiving purges the sealed secret (crypto-shredding).
* **Key rotation**: a new KEK becomes current; a resumable job re-wraps data keys only (the
  payloads are not re-encrypted, no plaintext is produced); the old KEK can then be retired.

Out of scope (stated, not defended): an attacker with the KEK *and* the database, or with code
execution in the control-plane process (it can read keys and plaintext in memory; Python cannot
reliably zero memory); a malicious API-key holder (the API is workspace-scoped, as Anthropic's:
anyone with an API key can create credentials and point sessions at them, and can make the
control plane contact any token endpoint it names).

Modules: ``keys`` (KEK interface, key files, keyring), ``crypto`` (envelope encryption),
``binding`` (normalization and associated data), ``cipher`` (a credential's sealed payload),
``params`` and ``auth_rules`` (request validation), ``service`` (CRUD and rotation),
``capability`` (signed tokens), ``broker`` (issue and redeem), ``oauth`` (single-flight refresh),
``material`` (the decrypted secret), ``components`` (all of it wired together), ``errors``.
"""

from __future__ import annotations

from control_plane.vault.broker import CredentialBroker, CredentialRef
from control_plane.vault.capability import Capability, CapabilitySigner
from control_plane.vault.cipher import CredentialCipher
from control_plane.vault.components import Vault
from control_plane.vault.crypto import SealedSecret, rewrap, seal, unseal
from control_plane.vault.errors import (
    CapabilityRejected,
    DecryptionFailed,
    KeyFileError,
    RefreshFailed,
    RejectReason,
    UnknownKey,
    VaultError,
)
from control_plane.vault.keys import FileKek, KeyEncryptionKey, Keyring
from control_plane.vault.material import SecretMaterial
from control_plane.vault.oauth import OAuthRefresher, RefreshResult
from control_plane.vault.service import RotationReport, VaultService

__all__ = [
    "Capability",
    "CapabilityRejected",
    "CapabilitySigner",
    "CredentialBroker",
    "CredentialCipher",
    "CredentialRef",
    "DecryptionFailed",
    "FileKek",
    "KeyEncryptionKey",
    "KeyFileError",
    "Keyring",
    "OAuthRefresher",
    "RefreshFailed",
    "RefreshResult",
    "RejectReason",
    "RotationReport",
    "SealedSecret",
    "SecretMaterial",
    "UnknownKey",
    "Vault",
    "VaultError",
    "VaultService",
    "rewrap",
    "seal",
    "unseal",
]
