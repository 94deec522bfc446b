"""Glue between sandboxes and egress: the edge's Docker networks and its one proxy.

:class:`EgressController` is owned by the sandbox manager. For each sandbox it creates it answers
"which network, which environment" (:meth:`EgressController.attachment`), and it keeps the proxy's
source-address table in step with the sandboxes (:meth:`grant_container`, :meth:`revoke`).

Networks, one of each per edge, created on first use and reused::

    <prefix>-egress-<edge>   --internal bridge, ICC off   allowlist sandboxes; the proxy listens
                                                          on its gateway (host side)
    <prefix>-open-<edge>     NAT bridge, ICC off          unrestricted sandboxes

Both carry the edge's labels plus ``outpost.network=<mode>``. A network found under the expected
name that is not labelled as this edge's, or is not internal when it must be, is refused rather
than used: a look-alike network must not turn an allowlist into open access. Docker calls go
through a :class:`NetworkBackend` (the sandbox runtime implements it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from ..errors import SandboxUnavailable
from .proxy import EgressProxy, LocalService, ProxyLimits, Resolver
from .spec import EgressMode, EgressSpec

__all__ = [
    "LABEL_NETWORK_MODE",
    "Attachment",
    "EgressController",
    "NetworkBackend",
    "NetworkRecord",
    "proxy_env",
]

log = logging.getLogger(__name__)

LABEL_NETWORK_MODE = "outpost.network"
_BRIDGE_OPTIONS = {"com.docker.network.bridge.enable_icc": "false"}  # sandboxes cannot reach each other


@dataclass(frozen=True)
class NetworkRecord:
    """A Docker network, as the backend reports it."""

    id: str
    name: str
    internal: bool
    gateway: str  # IPv4 address of the host side of the bridge ("" if none)
    labels: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)


class NetworkBackend(Protocol):
    """The Docker operations egress needs (implemented by ``DockerRuntime``)."""

    async def ensure_network(
        self, name: str, *, internal: bool, labels: Mapping[str, str], options: Mapping[str, str]
    ) -> NetworkRecord: ...

    async def list_networks(self, labels: Mapping[str, str]) -> list[NetworkRecord]: ...

    async def remove_network(self, name: str) -> bool: ...

    async def container_address(self, container_id: str, network: str) -> str: ...


@dataclass(frozen=True)
class Attachment:
    """Where a new sandbox goes: its only network, extra environment, and the proxy it must use."""

    network: str
    env: Mapping[str, str] = field(default_factory=dict)
    proxy_url: str = ""


def proxy_env(url: str) -> dict[str, str]:
    """The environment that points HTTP clients in the sandbox at the proxy, for every host."""
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": "",
        "no_proxy": "",
    }


class EgressController:
    """Networks and the proxy of one edge. :meth:`close` stops the proxy and keeps the networks."""

    def __init__(
        self,
        backend: NetworkBackend,
        *,
        labels: Mapping[str, str],
        allowlist_network: str,
        open_network: str,
        proxy_limits: ProxyLimits | None = None,
        resolver: Resolver | None = None,
        local: LocalService | None = None,
    ) -> None:
        """``local``: what the proxy serves itself (the edge's git relay), if anything."""
        self._local = local
        self._backend = backend
        self._labels = dict(labels)
        self._names = {EgressMode.ALLOWLIST: allowlist_network, EgressMode.UNRESTRICTED: open_network}
        self._proxy_limits = proxy_limits
        self._resolver = resolver
        self._proxy: EgressProxy | None = None
        self._lock = asyncio.Lock()

    @property
    def proxy(self) -> EgressProxy | None:
        """The running proxy, if an allowlist sandbox ever needed one."""
        return self._proxy

    async def attachment(self, spec: EgressSpec, *, preferred_proxy: str = "") -> Attachment | None:
        """Make sure the network (and, for ``allowlist``, the proxy) for ``spec`` exist.

        ``preferred_proxy``: the proxy URL an existing sandbox was created with; the proxy binds
        that port again if it can, so adopted sandboxes keep working after an edge restart.
        """
        if spec.mode is EgressMode.NONE:
            return None
        async with self._lock:
            record = await self._ensure_network(spec.mode)
            if spec.mode is EgressMode.UNRESTRICTED:
                return Attachment(record.name)
            proxy = await self._ensure_proxy(record.gateway, preferred_proxy)
            return Attachment(record.name, proxy_env(proxy.url), proxy.url)

    async def _ensure_network(self, mode: EgressMode) -> NetworkRecord:
        name = self._names[mode]
        internal = mode is EgressMode.ALLOWLIST
        labels = {**self._labels, LABEL_NETWORK_MODE: mode.value}
        record = await self._backend.ensure_network(
            name, internal=internal, labels=labels, options=_BRIDGE_OPTIONS
        )
        mismatched = (
            record.name != name
            or record.internal != internal
            or any(record.labels.get(key) != value for key, value in labels.items())
            or any(record.options.get(key) != value for key, value in _BRIDGE_OPTIONS.items())
        )
        if mismatched:
            raise SandboxUnavailable(
                f"network {name!r} exists but is not this edge's {mode.value} network; "
                "remove it or change sandbox.name_prefix"
            )
        if internal and not record.gateway:
            raise SandboxUnavailable(f"network {name!r} has no IPv4 gateway for the egress proxy")
        return record

    async def _ensure_proxy(self, gateway: str, preferred_url: str) -> EgressProxy:
        proxy = self._proxy
        if proxy is not None and proxy.host == gateway:
            return proxy
        if proxy is not None:  # the network was recreated with another subnet
            log.warning(
                "egress network gateway moved from %s to %s; restarting the proxy", proxy.host, gateway
            )
            self._proxy = None
            await proxy.close()
        preferred = urlsplit(preferred_url) if preferred_url else None
        if preferred and preferred.hostname == gateway and preferred.port:
            try:
                return await self._start_proxy(gateway, preferred.port)
            except OSError as exc:
                log.info("egress proxy cannot reuse port %d (%s); picking another", preferred.port, exc)
        try:
            return await self._start_proxy(gateway, 0)
        except OSError as exc:
            raise SandboxUnavailable(f"egress proxy cannot listen on {gateway}: {exc}") from None

    async def _start_proxy(self, host: str, port: int) -> EgressProxy:
        proxy = EgressProxy(host, port, limits=self._proxy_limits, resolver=self._resolver, local=self._local)
        await proxy.start()
        self._proxy = proxy
        return proxy

    async def grant_container(self, container_id: str, session_id: str, spec: EgressSpec) -> str:
        """Let the new allowlist sandbox ``container_id`` use the proxy; returns its address."""
        address = await self._backend.container_address(container_id, self._names[EgressMode.ALLOWLIST])
        self._grant(address, session_id, spec)
        return address

    async def restore(
        self, session_id: str, spec: EgressSpec, *, proxy_url: str, networks: Mapping[str, str]
    ) -> tuple[str, str]:
        """Re-register an existing sandbox (edge restart): returns its (network, address).

        ``proxy_url`` is the proxy it was created with; ``networks`` maps the networks it is on to
        its addresses. Raises SandboxUnavailable if it cannot get exactly the egress it had: then
        the caller replaces it.
        """
        attachment = await self.attachment(spec, preferred_proxy=proxy_url)
        network = attachment.network if attachment is not None else ""
        # A sandbox without network is listed on "none", or on nothing at all.
        expected = {network} if network else {"none"}
        if not set(networks) <= expected or (network and not networks):
            raise SandboxUnavailable(f"it is on networks {sorted(networks)}, expected only {expected}")
        if spec.mode is not EgressMode.ALLOWLIST:
            return network, ""
        assert attachment is not None
        if attachment.proxy_url != proxy_url:
            raise SandboxUnavailable(f"its proxy {proxy_url or '(none)'} is no longer served")
        address = networks[network]
        if not address:
            raise SandboxUnavailable(f"it has no address on {network}")
        self._grant(address, session_id, spec)
        return network, address

    def _grant(self, address: str, session_id: str, spec: EgressSpec) -> None:
        if self._proxy is None:
            raise SandboxUnavailable("the egress proxy is not running")
        self._proxy.grant(address, session_id, spec.allowlist)

    def revoke(self, address: str, session_id: str) -> None:
        if self._proxy is not None:
            self._proxy.revoke(address, session_id)

    async def collect(self, in_use: set[str]) -> list[str]:
        """Remove this edge's networks that no sandbox in ``in_use`` (network names) is on; stop the
        proxy with its network. Returns the names removed."""
        removed: list[str] = []
        async with self._lock:
            for record in await self._backend.list_networks(self._labels):
                if record.name in in_use:
                    continue
                if record.name == self._names[EgressMode.ALLOWLIST] and self._proxy is not None:
                    if self._proxy.granted():
                        continue  # a sandbox is being created or tracked on it right now
                    await self._stop_proxy()
                try:
                    if await self._backend.remove_network(record.name):
                        removed.append(record.name)
                except SandboxUnavailable as exc:
                    log.warning("could not remove network %s: %s", record.name, exc)
        return removed

    async def destroy_all(self) -> None:
        """Stop the proxy and remove every network labelled as this edge's (tests, uninstall)."""
        async with self._lock:
            await self._stop_proxy()
            for record in await self._backend.list_networks(self._labels):
                with contextlib.suppress(SandboxUnavailable):
                    await self._backend.remove_network(record.name)

    async def close(self) -> None:
        """Stop the proxy (idempotent). Networks and sandboxes stay for the next start."""
        await self._stop_proxy()

    async def _stop_proxy(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            await proxy.close()
