"""The public exports of the vault package and its API router are pinned."""

from __future__ import annotations

import importlib

import pytest

import control_plane.vault as vault

EXPECTED = {
    "control_plane.api.vaults": {"auth_json", "credential_json", "vault_json", "vaults_router"},
    "control_plane.vault.broker": {"CredentialBroker", "CredentialRef"},
    "control_plane.vault.capability": {"Capability", "CapabilitySigner"},
    "control_plane.vault.components": {"Vault"},
    "control_plane.vault.crypto": {"SealedSecret", "rewrap", "seal", "unseal"},
    "control_plane.vault.keys": {
        "KEY_BYTES",
        "FileKek",
        "KeyEncryptionKey",
        "Keyring",
        "create_key_file",
        "load_or_create_key_file",
        "read_key_file",
    },
    "control_plane.vault.material": {"SecretMaterial"},
    "control_plane.vault.oauth": {"OAuthRefresher", "RefreshResult", "scrub"},
    "control_plane.vault.service": {
        "CREDENTIAL_KIND",
        "MAX_CREDENTIALS_PER_VAULT",
        "ROTATION_KIND",
        "VAULT_KIND",
        "CredentialValidation",
        "RotationReport",
        "VaultService",
        "new_credential_id",
        "new_vault_id",
    },
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_module_exports(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    for name in mod.__all__:
        assert hasattr(mod, name)


def test_package_exports() -> None:
    assert set(vault.__all__) == {
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
    }
    for name in vault.__all__:
        assert hasattr(vault, name)
