"""The ``git:`` section of the edge's configuration: its own per-host git credentials.

Example (``tests/unit/git/test_git_config.py`` checks it)::

    git:
      credentials:
        - host: git.internal:8443            # host[:port] of the remote URL (default port omitted)
          username: outpost-bot              # Basic user name (default: x-access-token)
          token: {from_file: /etc/outpost-edge/secrets/git.token}   # mode 0600
        - host: github.com
          token: {from_env: GITHUB_TOKEN}
        - host: gitlab.internal
          scheme: bearer                     # Authorization: Bearer <token>
          token: {from_file: /etc/outpost-edge/secrets/gitlab.token}
      clone_timeout_s: 600

These credentials never leave the edge: they are not sent to the control plane and never enter a
sandbox. The edge uses them, outside the sandbox, to clone a session's repositories and to relay
``git pull`` / ``git push`` from the sandbox (see :mod:`edge_agent.git`). A token the control plane
delivers for one repository wins over the edge's credential for its host. Secrets are read when
they are used, so a rotated file takes effect at once; the edge checks them once at start.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edge_agent.mcp.config import SecretSource

__all__ = ["DEFAULT_USERNAME", "GitConfig", "GitCredentialConfig"]

DEFAULT_USERNAME = "x-access-token"
"""The Basic user name sent with a bare token (what GitHub and Gitea accept for tokens)."""

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_AUTHORITY = re.compile(rf"^{_LABEL}(\.{_LABEL})*(:[0-9]{{1,5}})?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GitCredentialConfig(_Strict):
    """The edge's credential for every repository on ``host``."""

    host: str = Field(description="`host[:port]` of the remote URL (default port omitted).")
    username: str = Field(
        DEFAULT_USERNAME,
        min_length=1,
        max_length=256,
        pattern=r"^[^:\s]+$",
        description="The Basic user name sent with the token.",
    )
    scheme: Literal["basic", "bearer"] = Field(
        "basic",
        description="`basic` (user name and token) or `bearer` (`Authorization: Bearer <token>`).",
    )
    token: SecretSource = Field(description="The token (a secret source).")

    @field_validator("host")
    @classmethod
    def _authority(cls, value: str) -> str:
        host = value.strip().lower()
        if not _AUTHORITY.match(host) or (":" in host and not 0 < int(host.rpartition(":")[2]) < 65536):
            raise ValueError(f"{value!r} is not host or host:port (no scheme, path or user info)")
        return host


class GitConfig(_Strict):
    credentials: tuple[GitCredentialConfig, ...] = Field(
        (),
        description="One credential per host; a token the control plane delivers for one repository wins "
        "over it.",
    )
    clone_timeout_s: float = Field(600.0, gt=0, description="One repository: clone and checkout.")
    relay_idle_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A relayed pull or push with no bytes moving.",
    )

    @model_validator(mode="after")
    def _unique_hosts(self) -> GitConfig:
        hosts = [c.host for c in self.credentials]
        twice = sorted({h for h in hosts if hosts.count(h) > 1})
        if twice:
            raise ValueError(f"git.credentials: more than one credential for {', '.join(twice)}")
        return self
