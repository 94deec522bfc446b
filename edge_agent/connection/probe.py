"""One authenticated hello, for ``outpost-edge doctor``: dial the way the link dials, say hello,
wait for the Welcome, hang up.

The hello carries the ``probe`` capability (:data:`outpost_wire.admission.PROBE_CAPABILITY`): the
control plane authenticates it like any other and answers it, but does not register it, so a
running edge's tunnel stays up while the doctor checks the same host. A refusal comes back as a
:class:`~edge_agent.connection.transport.TransportError` with ``unauthenticated`` (and
``refusal`` when it is final, e.g. ``revoked``), exactly as the link would see it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from edge_agent.connection.dialer import Dialer
from edge_agent.connection.selection import TransportKind
from edge_agent.connection.transport import Transport, TransportError
from outpost_wire.errors import ErrorCode, OutpostError
from outpost_wire.frames import Hello, Welcome
from outpost_wire.session import (
    PeerError,
    ProtocolError,
    Role,
    SessionConfig,
    TunnelSession,
    WelcomeReceived,
)

__all__ = ["HelloAnswer", "probe_hello"]


@dataclass(frozen=True, slots=True)
class HelloAnswer:
    """The control plane welcomed the hello: who answered, over what, and how fast."""

    control_plane_id: str
    software_version: str
    transport: TransportKind | None
    took_s: float


async def probe_hello(dialer: Dialer, hello: Hello, *, answer_timeout_s: float = 10.0) -> HelloAnswer:
    """Connect with ``dialer`` (its routes, proxy and transport choice), send ``hello``, and
    return the Welcome's facts. Raises TransportError (``refusal`` set for a final refusal)."""
    started = time.monotonic()
    transport = await dialer.connect()
    try:
        async with asyncio.timeout(answer_timeout_s):
            welcome = await _exchange(transport, hello)
    except TimeoutError:
        raise TransportError(
            f"the control plane did not answer the hello within {answer_timeout_s:g} s"
        ) from None
    finally:
        await transport.close()
    return HelloAnswer(
        control_plane_id=welcome.control_plane_id,
        software_version=welcome.software_version,
        transport=dialer.current,
        took_s=time.monotonic() - started,
    )


async def _exchange(transport: Transport, hello: Hello) -> Welcome:
    session = TunnelSession(Role.EDGE, SessionConfig())
    session.connection_made(time.monotonic())
    try:
        session.send_hello(hello)
    except OutpostError as exc:
        raise TransportError(f"cannot send the hello: {exc}") from None
    while True:
        for data in session.data_to_send():
            await transport.send(data)
        data_in = await transport.receive()
        if data_in is None:
            raise TransportError("the control plane closed the tunnel without answering the hello")
        session.receive_data(data_in, time.monotonic())
        for event in session.events_received():
            if isinstance(event, WelcomeReceived):
                return event.welcome
            if isinstance(event, PeerError):
                message = f"the control plane answered the hello with {event.code.value}: {event.message}"
                if event.code is ErrorCode.UNAUTHENTICATED:
                    raise TransportError.refused(message, event.message)
                raise TransportError(message)
            if isinstance(event, ProtocolError):
                raise TransportError(f"tunnel protocol error {event.code.value}: {event.message}")
