"""``SecretMaterial``: a decrypted secret on its way to one upstream request.

It exists only inside the control plane's MCP client path, for the duration of a call. Its
``repr``/``str``/format never show the value, and it refuses to be pickled, so it cannot end up
in a log line, an exception message, an event payload or a cache by accident. Call
:meth:`SecretMaterial.reveal` at the last moment (building the request header).
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["SecretMaterial"]


class SecretMaterial:
    __slots__ = ("_value", "auth_type", "credential_id", "secret_name", "vault_id")

    def __init__(
        self,
        value: str,
        *,
        vault_id: str,
        credential_id: str,
        auth_type: str,
        secret_name: str | None = None,
    ) -> None:
        self._value = value
        self.vault_id = vault_id
        self.credential_id = credential_id
        self.auth_type = auth_type
        self.secret_name = secret_name  # environment_variable credentials: the variable's name

    def reveal(self) -> str:
        """The secret itself. Use it, do not keep it."""
        return self._value

    def __repr__(self) -> str:
        return (
            f"SecretMaterial(vault_id={self.vault_id!r}, credential_id={self.credential_id!r}, "
            f"auth_type={self.auth_type!r}, value=<redacted>)"
        )

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("SecretMaterial cannot be pickled")
