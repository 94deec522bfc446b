"""Which HTTP CONNECT proxy the tunnel goes through, if any.

Both transports tunnel through the proxy with ``CONNECT host:port`` (the proxy never sees the
frames), so one setting serves both:

1. ``connection.proxy_url`` in the config, if set (``none`` turns proxying off);
2. otherwise ``https_proxy``, then ``HTTPS_PROXY`` (the lower-case one wins, as with curl), unless
   the target matches ``no_proxy`` / ``NO_PROXY``. ``HTTP_PROXY`` is not used: the tunnel is
   always a CONNECT tunnel, and ``HTTP_PROXY`` often names a plain-HTTP caching proxy.

``NO_PROXY`` entries, comma- or space-separated, case-insensitive: ``*`` (everything), a domain
(``example.com`` or ``.example.com``: the domain and its subdomains; ``*.example.com`` likewise),
an IP address, a CIDR block (``10.0.0.0/8``), each optionally with ``:port``.

Credentials in the proxy URL (``http://user:pass@host:port``) are sent as
``Proxy-Authorization: Basic``; they never appear in logs (:attr:`ProxyConfig.redacted`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from edge_agent.errors import ConfigError

__all__ = ["ProxyConfig", "no_proxy_matches", "parse_proxy_url", "resolve_proxy", "resolve_proxy_source"]

_DISABLED = "none"


@dataclass(frozen=True)
class ProxyConfig:
    """An HTTP proxy that accepts ``CONNECT``. ``url`` (with credentials) is kept out of ``repr``."""

    url: str = field(repr=False)
    host: str
    port: int
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def redacted(self) -> str:
        """The URL for logs: the password replaced by ``***``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.username}:***@" if self.username is not None else ""
        return f"http://{user}{host}:{self.port}"


def parse_proxy_url(url: str) -> ProxyConfig:
    """Parse ``http://[user:pass@]host[:port]`` (port 80 if left out). Raises ConfigError."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text  # curl's convention for a bare host:port
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"invalid proxy URL: {exc}") from None
    if parts.scheme != "http":
        raise ConfigError(
            f"unsupported proxy URL scheme {parts.scheme!r}: only http:// CONNECT proxies are supported"
        )
    if not parts.hostname:
        raise ConfigError("invalid proxy URL: no host")
    return ProxyConfig(
        url=text,
        host=parts.hostname,
        port=port or 80,
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def resolve_proxy(
    host: str, port: int, *, override: str | None, env: Mapping[str, str]
) -> ProxyConfig | None:
    """The proxy to reach ``host:port`` through, or ``None`` to connect directly."""
    return resolve_proxy_source(host, port, override=override, env=env)[0]


def resolve_proxy_source(
    host: str, port: int, *, override: str | None, env: Mapping[str, str]
) -> tuple[ProxyConfig | None, str]:
    """:func:`resolve_proxy`, and where the answer came from, in words for ``outpost-edge doctor``
    (``connection.proxy_url``, ``https_proxy``, ``NO_PROXY matches``, ...)."""
    if override is not None:
        if override.strip().lower() == _DISABLED:
            return None, "connection.proxy_url is none"
        return parse_proxy_url(override), "connection.proxy_url"
    name = "https_proxy" if env.get("https_proxy") else "HTTPS_PROXY"
    url = env.get(name)
    if not url:
        return None, "no connection.proxy_url, no https_proxy/HTTPS_PROXY"
    no_name = "no_proxy" if "no_proxy" in env else "NO_PROXY"
    if no_proxy_matches(host, port, env.get(no_name) or ""):
        return None, f"{no_name} matches {host}"
    return parse_proxy_url(url), name


def no_proxy_matches(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``host:port`` is excluded from proxying by a ``NO_PROXY`` value."""
    host = host.strip("[]").lower().rstrip(".")
    address = _ip(host)
    for raw in no_proxy.replace(",", " ").split():
        entry = raw.lower()
        if entry == "*":
            return True
        entry, entry_port = _split_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            if _ip_matches(address, entry):
                return True
            continue
        domain = entry.removeprefix("*").lstrip(".").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port or [v6]
        inner, _, rest = entry[1:].partition("]")
        return inner, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _ip_matches(address: ipaddress.IPv4Address | ipaddress.IPv6Address, entry: str) -> bool:
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return address.version == network.version and address in network
