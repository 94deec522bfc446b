"""Check that an address can be listened on, before anything starts (a clear error, not a late one)."""

from __future__ import annotations

import socket

from control_plane.errors import ListenFailed

__all__ = ["check_bindable"]


def check_bindable(what: str, host: str, port: int) -> None:
    """Raise :class:`ListenFailed` if ``host:port`` cannot be bound now (in use, not this host's
    address, a privileged port). Port 0 (any free port) always can. ``what`` names the listener
    in the message ("API", "tunnel")."""
    if port == 0:
        return
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ListenFailed(what, address, f"cannot resolve {host!r}: {exc.strerror}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            raise ListenFailed(what, address, exc.strerror or str(exc)) from None
