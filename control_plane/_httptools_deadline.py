"""uvicorn's httptools protocol with a header-read deadline (see :mod:`control_plane.http_limits`).

A module of its own: importing it needs ``httptools``, which is optional.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeaderDeadlineHttpToolsProtocol"]

log = logging.getLogger("control_plane.http_limits")


class HeaderDeadlineHttpToolsProtocol(HttpToolsProtocol):
    """The deadline runs from the connection's opening, or from the parser's first byte of the
    next request (``on_message_begin``), to the end of the request head (``on_headers_complete``)."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

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

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        log.debug("closed a connection whose request head did not arrive within %g s", self.header_timeout_s)
        self.transport.close()
