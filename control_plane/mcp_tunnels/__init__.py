"""MCP tunnels: private MCP servers reached through the edges that hold a tunnel's connector token.

- :mod:`~control_plane.mcp_tunnels.service`: :class:`TunnelService`, tunnels, tokens, certificates
  and the route the MCP router reads;
- :mod:`~control_plane.mcp_tunnels.ca_pem`: the check of an uploaded CA certificate;
- :mod:`~control_plane.mcp_tunnels.commands`: the typed values the service takes and gives.

See docs/mcp-tunnels.md.
"""

from __future__ import annotations

from control_plane.mcp_tunnels.ca_pem import MAX_PEM_BYTES, CaCertificate, parse_ca_certificate
from control_plane.mcp_tunnels.commands import ListQuery, RevealedToken
from control_plane.mcp_tunnels.service import (
    CERTIFICATE_KIND,
    DEFAULT_BASE_DOMAIN,
    MAX_ACTIVE_CERTIFICATES,
    TUNNEL_KIND,
    TunnelService,
    token_hash,
)

__all__ = [
    "CERTIFICATE_KIND",
    "DEFAULT_BASE_DOMAIN",
    "MAX_ACTIVE_CERTIFICATES",
    "MAX_PEM_BYTES",
    "TUNNEL_KIND",
    "CaCertificate",
    "ListQuery",
    "RevealedToken",
    "TunnelService",
    "parse_ca_certificate",
    "token_hash",
]
