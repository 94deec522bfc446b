"""The ``repositories`` rule of the edge's policy: which repository URLs the edge may clone and
relay. The edge clones on its own host, outside the sandbox and its egress proxy, so a
repository URL is a request the control plane makes the edge send from inside the customer's
network; by default none is allowed.

Example (in ``policy.yaml``)::

    repositories:
      allowed_hosts:            # hostnames (or IPv4 addresses), or *.suffix; default: none
        - github.com
        - "*.git.corp.example"
      allow_http: false         # plain http:// remotes (default: https only)
      allow_networks:           # non-public addresses the hosts may resolve to (CIDR)
        - 10.20.0.0/16          #   e.g. the internal git server's network; default: none

A repository is refused (:class:`~edge_agent.errors.RepositoryRefused`, a ``repository_clone_error``
for the session, the message naming the rule) unless its scheme is allowed (``https``; ``http``
with ``allow_http``; nothing else), its host is covered by ``allowed_hosts`` (``*.example.com``
covers ``a.example.com`` and ``b.a.example.com``, not ``example.com``), and every address it
resolves to is public or inside ``allow_networks`` (:mod:`outpost_wire.addresses`: loopback,
link-local and metadata, private, CGNAT, unique-local ... are refused, in any spelling). The host
is resolved once; git is then told to use exactly the checked addresses (``http.curloptResolve``)
and never follows a redirect.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edge_agent.errors import RepositoryRefused
from edge_agent.git.remote import RemoteUrl
from outpost_wire.addresses import (
    AddressPolicy,
    AddressRefused,
    ResolutionFailed,
    Resolved,
    Resolver,
    literal_address,
    resolve,
    system_resolver,
)

__all__ = ["RepositoryPolicy"]

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


class RepositoryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_hosts: tuple[str, ...] = Field(
        (),
        description="Hosts whose repositories the edge may clone and relay: a hostname, an IPv4 address or "
        "`*.suffix` (any port). Default: none, every repository is refused.",
    )
    allow_http: bool = Field(
        False, description="Allow plain `http://` repository URLs (default: https only)."
    )
    allow_networks: tuple[str, ...] = Field(
        (),
        description="Networks (CIDR) a repository host may resolve into although they are not public, e.g. "
        "an internal git server's. Loopback, link-local/metadata, private, CGNAT, unique-local, multicast "
        "and reserved addresses are refused otherwise.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for entry in value:
            host = entry.strip().lower().rstrip(".")
            bare = host[2:] if host.startswith("*.") else host
            address = literal_address(bare)
            if address is not None:
                if bare != host or not isinstance(address, ipaddress.IPv4Address) or str(address) != bare:
                    raise ValueError(f"{entry!r}: an address entry is a plain IPv4 address, without wildcard")
            elif len(bare) > 253 or not _HOSTNAME.match(bare):
                raise ValueError(
                    f"{entry!r} is not a hostname, an IPv4 address or *.suffix (no port, no URL)"
                )
            out.append(host)
        return tuple(sorted(set(out)))  # canonical: equal policies share a digest

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        AddressPolicy.parse(value)
        return value

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        for entry in self.allowed_hosts:
            if entry.startswith("*.") and host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
            if entry == host:
                return True
        return False

    def check(self, remote: RemoteUrl) -> None:
        """The static part: scheme, host and a numeric host's address. Raises RepositoryRefused."""
        if remote.scheme != "https" and not (remote.scheme == "http" and self.allow_http):
            raise RepositoryRefused(
                remote.url,
                "repositories.allow_http",
                f"{remote.scheme}:// repository URLs are not allowed by this edge's policy (https only)",
            )
        if not self.host_allowed(remote.host):
            raise RepositoryRefused(
                remote.url,
                "repositories.allowed_hosts",
                f"host {remote.host!r} is not in this edge's repositories.allowed_hosts",
            )
        try:
            AddressPolicy.parse(self.allow_networks).check_host(remote.host)
        except AddressRefused as exc:
            raise RepositoryRefused(remote.url, f"repositories.address.{exc.rule}", _address(exc)) from None

    async def resolve(self, remote: RemoteUrl, *, resolver: Resolver = system_resolver) -> Resolved:
        """:meth:`check`, then the host resolved once with every address checked: the addresses
        to dial. Raises RepositoryRefused (or RepositoryError when the host does not resolve)."""
        self.check(remote)
        port = remote.port or (443 if remote.scheme == "https" else 80)
        try:
            return await resolve(
                remote.host, port, AddressPolicy.parse(self.allow_networks), resolver=resolver
            )
        except AddressRefused as exc:
            raise RepositoryRefused(remote.url, f"repositories.address.{exc.rule}", _address(exc)) from None
        except ResolutionFailed as exc:
            raise RepositoryRefused(remote.url, "repositories.address.resolve", str(exc)) from None


def _address(exc: AddressRefused) -> str:
    return f"{exc}; the edge dials it only if repositories.allow_networks allows it"
