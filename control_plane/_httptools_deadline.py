"""uvicorn's httptools protocol with a header-read deadline (see :mod:`control_plane.http_limits`).

A module of its own: importing it needs ``httptools``, which is optional.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from control_plane.head_deadline import HeadDeadline

__all__ = ["HeaderDeadlineHttpToolsProtocol"]


class HeaderDeadlineHttpToolsProtocol(HeadDeadline, HttpToolsProtocol):
    """The deadline runs from the connection's opening, or from the parser's first byte of the
    next request (``on_message_begin``), to the end of the request head (``on_headers_complete``)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()  # no-op when armed: a trickle does not move the deadline

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)
