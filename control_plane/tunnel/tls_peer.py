"""The TLS client certificate of an ASGI connection, when TLS reaches the control plane.

ASGI has a TLS extension (``scope["extensions"]["tls"]["client_cert_chain"]``, PEM strings), but
uvicorn does not implement it: checked against uvicorn 0.54.0 (h11 HTTP, ``websockets-sansio`` and
``websockets`` WebSocket protocols; ``wsproto`` is built the same way) with Starlette 1.10. There
the ``receive`` callable handed to the application is a bound method of uvicorn's per-connection
protocol object, which keeps the asyncio transport in ``.transport``; Starlette keeps that callable
as ``WebSocket._receive`` (our middleware passes it through untouched for WebSockets). The
transport of a TLS connection has an ``ssl_object`` whose ``getpeercert(binary_form=True)`` is the
client's leaf certificate (DER), and only a certificate the TLS layer verified against its CA
(``CERT_OPTIONAL``) gets that far.

All of that is isolated in :func:`peer_certificate`. Anything unexpected gives ``None``, and the
caller falls back to proof of possession; ``tests/integration/tunnel_ws/test_tls_peer.py`` fails
if an upgrade of uvicorn stops giving us the certificate. The certificate found here is checked
again by the caller (issuer, edge, fingerprint, revocation), never trusted as such.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from starlette.websockets import WebSocket

__all__ = ["peer_certificate"]

log = logging.getLogger(__name__)


def peer_certificate(websocket: WebSocket) -> bytes | None:
    """The DER client certificate the TLS layer verified for this connection, or ``None`` (plain
    HTTP, TLS terminated in front of us, no certificate sent, or a server we cannot look into)."""
    scope: Any = websocket.scope
    receive: Any = getattr(websocket, "_receive", None)  # Starlette keeps the server's callable here
    try:
        # 1. The standard ASGI TLS extension, for servers that implement it.
        extensions = scope.get("extensions") if isinstance(scope, dict) else None
        tls = extensions.get("tls") if isinstance(extensions, dict) else None
        if isinstance(tls, dict):
            chain = tls.get("client_cert_chain")
            if chain and isinstance(chain[0], str) and not tls.get("client_cert_error"):
                return ssl.PEM_cert_to_DER_cert(chain[0])
        # 2. uvicorn (see the module docstring): receive.__self__.transport.get_extra_info(...).
        protocol = getattr(receive, "__self__", None)
        transport = getattr(protocol, "transport", None)
        get_extra_info = getattr(transport, "get_extra_info", None)
        if not callable(get_extra_info):
            return None
        ssl_object = get_extra_info("ssl_object")
        if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
            return None
        der = ssl_object.getpeercert(binary_form=True)
    except (ValueError, TypeError, AttributeError, IndexError, ssl.SSLError) as exc:
        log.debug("tunnel: cannot read the TLS peer certificate: %s", exc)
        return None
    return der if isinstance(der, bytes) and der else None
