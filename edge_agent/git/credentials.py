"""Which credential the edge uses for a repository, and how it goes on the wire.

Order (:meth:`EdgeCredentials.select`): a token the control plane delivered for that repository;
otherwise the edge's own credential for the remote's authority (``git.credentials``); otherwise
none (anonymous). The credential is used outside the sandbox only: as an ``Authorization`` header
in the environment of the edge's ``git clone`` (:mod:`.clone`) and on requests the relay makes
(:mod:`.relay`). :class:`GitCredential` never shows its secret in ``repr``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from edge_agent.git.config import DEFAULT_USERNAME, GitCredentialConfig
from edge_agent.git.remote import RemoteUrl
from edge_agent.mcp.config import SecretSource
from edge_agent.mcp.secrets import resolve_secret

__all__ = ["CredentialOrigin", "EdgeCredentials", "GitCredential", "SecretResolver"]

CredentialOrigin = Literal["delivered", "edge"]
SecretResolver = Callable[..., str]
"""``resolve(source, *, where=...) -> str`` (default :func:`edge_agent.mcp.secrets.resolve_secret`)."""


@dataclass(frozen=True)
class GitCredential:
    """A credential for one remote. ``origin`` says where it came from (for logs)."""

    origin: CredentialOrigin
    scheme: Literal["basic", "bearer"]
    username: str
    secret: str = field(repr=False)

    def authorization(self) -> str:
        """The ``Authorization`` header value."""
        if self.scheme == "bearer":
            return f"Bearer {self.secret}"
        pair = f"{self.username}:{self.secret}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    def redactions(self) -> tuple[str, ...]:
        """Every form of the secret that could show up in a message (for :func:`.remote.redact`)."""
        header = self.authorization()
        return (self.secret, header, header.partition(" ")[2])


class EdgeCredentials:
    """The edge's own per-host credentials; secrets are read when used (a rotated file counts)."""

    def __init__(
        self, configs: Sequence[GitCredentialConfig] = (), *, resolve: SecretResolver = resolve_secret
    ) -> None:
        self._by_host = {c.host: c for c in configs}
        self._resolve = resolve

    def check(self) -> None:
        """Read every secret once (at start-up): raises ConfigError naming the bad one."""
        for host, config in self._by_host.items():
            self._secret(host, config.token)

    def configured_for(self, remote: RemoteUrl) -> GitCredentialConfig | None:
        return self._by_host.get(remote.authority)

    def select_now(self, remote: RemoteUrl, delivered_token: str) -> GitCredential | None:
        """The credential to use for ``remote`` (see the module docstring). Blocking: may read a
        secret file."""
        if delivered_token:
            return GitCredential("delivered", "basic", DEFAULT_USERNAME, delivered_token)
        config = self.configured_for(remote)
        if config is None:
            return None
        secret = self._secret(config.host, config.token)
        return GitCredential("edge", config.scheme, config.username, secret)

    async def select(self, remote: RemoteUrl, delivered_token: str) -> GitCredential | None:
        """:meth:`select_now` off the event loop (only when a secret has to be read)."""
        if delivered_token or self.configured_for(remote) is None:
            return self.select_now(remote, delivered_token)
        return await asyncio.to_thread(self.select_now, remote, delivered_token)

    def _secret(self, host: str, source: SecretSource) -> str:
        return self._resolve(source, where=f"git.credentials[{host}].token")
