"""``OutboundGuard``: the one code path for every URL the control plane dials on a user's behalf.

OAuth token endpoints of vault credentials and the MCP servers of agents (and whatever comes
later) are named by API callers, and the control plane dials them from inside its own network.
So each such URL is checked twice, against :mod:`outpost_wire.addresses`:

* **when it is stored** (credential or agent create/update): :meth:`OutboundGuard.check_url`
  refuses, with a 400 naming the rule, a URL whose host is a loopback, link-local, metadata,
  private, CGNAT, unspecified, multicast or reserved address in any spelling (``2130706433``,
  ``[::ffff:127.0.0.1]`` ...) or a ``localhost`` name. Host names are not resolved here (DNS can
  change after the check anyway);
* **when it is dialled**: the HTTP clients the guard makes connect through
  :class:`PinnedBackend`, which resolves the host once per connection (``getaddrinfo`` off the
  event loop), refuses the connection when ANY address is not allowed
  (:class:`OutboundRefused`), and connects to the checked address itself, so DNS rebinding cannot
  swap it. TLS still verifies, and SNI and ``Host`` still name, the URL's host. Redirects are
  never followed and no proxy from the environment is used.

The operator allows private networks with ``outbound_allow_networks`` (CIDR list; default none).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from control_plane.errors import ControlPlaneError, InvalidRequest
from outpost_wire.addresses import (
    AddressPolicy,
    AddressRefused,
    ResolutionFailed,
    Resolved,
    Resolver,
    pinned_connect,
    resolve,
    system_resolver,
)

__all__ = ["OutboundGuard", "OutboundRefused", "Pin", "PinnedBackend"]

log = logging.getLogger(__name__)

_HINT = "; the control plane dials it only if outbound_allow_networks allows it"

Pin = Callable[[str, int], Awaitable[Resolved]]
"""``pin(host, port)``: the host resolved once and checked (raises :class:`OutboundRefused`)."""


class OutboundRefused(ControlPlaneError):
    """A URL the control plane was to dial resolves to an address the outbound rules refuse (or
    does not resolve). ``rule``: ``outbound.<class>`` (``outbound.loopback`` ...) or
    ``outbound.resolve``."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """An ``httpcore`` network backend that dials only checked addresses (see the module doc)."""

    def __init__(self, pin: Pin) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._pin = pin

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream: httpcore.AsyncNetworkStream = await pinned_connect(
            self._inner,
            self._pin,
            (httpcore.ConnectError, httpcore.ConnectTimeout),
            host,
            port,
            timeout,
            local_address,
            socket_options,
        )
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused("outbound.scheme", "outbound requests never use a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, with its connection pool dialling through :class:`PinnedBackend`."""

    def __init__(self, pin: Pin, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx keeps its pool in ``_pool`` and has no parameter for the network backend; the
        # pinning tests (tests/unit/test_outbound.py, the MCP and vault rebinding tests) fail if
        # this stops taking effect.
        self._pool = httpcore.AsyncConnectionPool(ssl_context=ssl_context, network_backend=PinnedBackend(pin))


class OutboundGuard:
    """Checks and dials user-named URLs (see the module docstring). ``allow_networks``: CIDR
    strings the operator allows; ``resolver``: a test hook (the system resolver by default)."""

    def __init__(self, allow_networks: Sequence[str] = (), *, resolver: Resolver = system_resolver) -> None:
        self.policy = AddressPolicy.parse(allow_networks)
        self._resolver = resolver

    def check_url(self, url: str, *, param: str) -> None:
        """The static check when a URL is stored: InvalidRequest (400) naming the rule."""
        try:
            host = urlsplit(url.strip()).hostname or ""
        except ValueError:
            raise InvalidRequest(f"{param}: not a valid URL", param=param) from None
        try:
            self.policy.check_host(host)
        except AddressRefused as exc:
            raise InvalidRequest(f"{param}: {exc}{_HINT} (rule: outbound.{exc.rule})", param=param) from None

    async def pin(self, host: str, port: int) -> Resolved:
        """Resolve ``host`` once and check every address; :class:`OutboundRefused` otherwise."""
        try:
            return await resolve(host, port, self.policy, resolver=self._resolver)
        except AddressRefused as exc:
            log.warning("outbound request to %s refused: %s", exc.address, exc.rule)
            raise OutboundRefused(f"outbound.{exc.rule}", f"{exc}{_HINT}") from None
        except ResolutionFailed as exc:
            raise OutboundRefused("outbound.resolve", str(exc)) from None

    async def check_dial(self, url: str) -> Resolved:
        """:meth:`pin` for a URL's host and port (a pre-flight check before a client opens)."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port
        except ValueError:
            raise OutboundRefused("outbound.url", "not a valid URL") from None
        if parts.scheme.lower() not in ("http", "https") or not host:
            raise OutboundRefused("outbound.url", "only http and https URLs with a host are dialled")
        return await self.pin(host, port or (443 if parts.scheme.lower() == "https" else 80))

    def http_client(self, *, timeout_s: float) -> httpx.AsyncClient:
        """An ``httpx`` client that dials only checked addresses and follows no redirect. The
        caller owns (and closes) it."""
        return httpx.AsyncClient(
            transport=_PinnedTransport(self.pin, httpx.create_ssl_context()),
            timeout=timeout_s,
            follow_redirects=False,
            trust_env=False,
        )
