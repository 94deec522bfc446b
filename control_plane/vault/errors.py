"""Errors of the vault.

::

    ControlPlaneError (control_plane.errors)
    └── VaultError
        ├── KeyFileError          a key file is missing, malformed, or open to group/others
        ├── DecryptionFailed      authentication failed: tampered, moved to another row, wrong key
        │   └── UnknownKey        no key with the ciphertext's ``key_id`` in the keyring
        ├── CapabilityRejected    the broker refused a capability (``.reason``)
        └── RefreshFailed         an OAuth refresh did not produce a token (``.outcome``)

Messages never contain secret values, wrapped keys or capability tokens.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from control_plane.errors import ControlPlaneError

__all__ = [
    "CapabilityRejected",
    "DecryptionFailed",
    "KeyFileError",
    "RefreshFailed",
    "RejectReason",
    "UnknownKey",
    "VaultError",
]


class VaultError(ControlPlaneError):
    """Base class of vault errors."""


class KeyFileError(VaultError):
    """A key file cannot be used: missing, wrong size, not a regular file, or readable by others."""


class DecryptionFailed(VaultError):
    """A sealed secret did not authenticate. Deliberately says nothing about which part failed."""


class UnknownKey(DecryptionFailed):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"no key-encryption key {key_id!r} in the keyring")
        self.key_id = key_id


class RejectReason(enum.Enum):
    MALFORMED = "malformed"  # not a capability token of ours
    SIGNATURE = "signature"  # bad MAC: forged or altered
    EXPIRED = "expired"
    FENCED = "fenced"  # the session's lease epoch moved on (or the lease is gone): a zombie harness
    UPSTREAM = "upstream"  # asked for another upstream than the capability (or credential) allows
    REVOKED = "revoked"  # session, vault or credential archived, deleted or changed since issue
    NOT_ALLOWED = "not_allowed"  # issue: the credential is not in one of the session's vaults


class CapabilityRejected(VaultError):
    def __init__(self, reason: RejectReason, detail: str = "") -> None:
        super().__init__(
            f"credential capability rejected: {reason.value}" + (f" ({detail})" if detail else "")
        )
        self.reason = reason


class RefreshFailed(VaultError):
    """``outcome`` is one of the API's refresh statuses: ``failed`` (the token endpoint answered
    with an error; ``status_code`` set), ``connect_error`` or ``no_refresh_token``."""

    def __init__(
        self,
        outcome: str,
        message: str,
        status_code: int | None = None,
        http_response: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status_code = status_code
        #: The token endpoint's error response, scrubbed of secrets and truncated (API shape
        #: ``{status_code, content_type, body, body_truncated}``).
        self.http_response = http_response
