"""The header-read deadline of the HTTP port, as a mixin for uvicorn's protocols (see
:mod:`control_plane.http_limits`).

A module of its own so that both protocols can mix it in, the ``h11`` one of
:mod:`control_plane.http_limits` and the ``httptools`` one of :mod:`control_plane._httptools_deadline`
(imported only where ``httptools`` is installed), without an import cycle between them.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["HeadDeadline"]

log = logging.getLogger(__name__)


class HeadDeadline:
    """The header-read deadline, for a uvicorn HTTP protocol class to mix in (before it): the
    protocol arms the timer where a request head starts and cancels it where the head is in."""

    header_timeout_s: float = 10.0
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _header_timer: asyncio.TimerHandle | None = None

    def _awaiting_head(self) -> bool:
        """Whether a request head is still expected when the deadline passes."""
        return True

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._awaiting_head():
            return
        log.debug("closed a connection whose request head did not arrive within %g s", self.header_timeout_s)
        self.transport.close()
