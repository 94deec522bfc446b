"""Revocation is final: a refusal for a final reason stops the link (REFUSED, no retry), at
connect time and on a live tunnel; any other refusal or error is retried."""

from __future__ import annotations

import asyncio

import pytest

from edge_agent.connection import Link, LinkState, TransportError
from outpost_wire.admission import FINAL_REASONS, final_refusal, refusal_message
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import PROTOCOL_VERSION, Welcome
from outpost_wire.session import Role, SessionConfig, TunnelSession
from outpost_wire.tunnel_events import HelloReceived
from tests.support import eventually
from tests.unit.edge._link_support import CONFIG, Pipe, SlowHandler, hello


def _link(connect) -> Link:  # type: ignore[no-untyped-def]
    return Link(
        connect=connect, hello=hello, handler=SlowHandler(), config=CONFIG, session_config=SessionConfig()
    )


@pytest.mark.parametrize("reason", sorted(FINAL_REASONS))
def test_final_reasons_are_read_back_from_the_control_planes_words(reason: str) -> None:
    assert final_refusal(refusal_message(reason)) == reason
    assert final_refusal(f"outpost: unauthenticated: {refusal_message(reason)}") == reason


@pytest.mark.parametrize(
    "text", ["edge authentication failed: not_yet_valid", "token expired", "", "revoked", "superseded"]
)
def test_other_words_are_not_final(text: str) -> None:
    assert final_refusal(text) is None


async def test_a_final_refusal_at_connect_stops_the_link_for_good() -> None:
    attempts = 0

    async def connect() -> Pipe:
        nonlocal attempts
        attempts += 1
        raise TransportError.refused(
            "tunnel failed: UNAUTHENTICATED: edge authentication failed: revoked",
            "edge authentication failed: revoked",
        )

    link = _link(connect)
    await asyncio.wait_for(link.run(), 5)  # returns by itself: no retry
    assert (link.state, link.refusal, attempts) == (LinkState.REFUSED, "revoked", 1)
    assert "revoked" in (link.last_error or "")
    await link.drain(1)  # the daemon's close: a no-op now
    assert link.state is LinkState.REFUSED


async def test_a_refusal_that_may_pass_is_retried() -> None:
    attempts = 0

    async def connect() -> Pipe:
        nonlocal attempts
        attempts += 1
        raise TransportError.refused(
            "HTTP 401", "outpost: unauthenticated: edge authentication failed: not_yet_valid"
        )

    link = _link(connect)
    runner = asyncio.create_task(link.run())
    await eventually(lambda: attempts >= 3)
    assert link.refusal is None and link.state is not LinkState.REFUSED
    await link.drain(0)
    await asyncio.wait_for(runner, 5)


async def _control(pipe: Pipe, code: ErrorCode, message: str) -> None:
    """Welcome the edge, then close the tunnel with an error frame, as the control plane does when
    it revokes a connected edge (or supersedes, or drains it)."""
    session = TunnelSession(Role.CONTROL, SessionConfig())
    session.connection_made(0.0)
    while (data := await pipe.to_control.get()) is not None:
        session.receive_data(data, 0.0)
        if any(isinstance(ev, HelloReceived) for ev in session.events_received()):
            session.send_welcome(Welcome("cp", "test", PROTOCOL_VERSION, 10.0))
            session.close(code, message)
        for out in session.data_to_send():
            await pipe.to_edge.put(out)


@pytest.mark.parametrize(
    ("code", "message", "final"),
    [
        (ErrorCode.UNAUTHENTICATED, refusal_message("revoked"), True),
        (ErrorCode.UNAUTHENTICATED, "hello edge_id does not match the client certificate", False),
        (ErrorCode.UNAVAILABLE, "superseded by a newer connection", False),
        (ErrorCode.UNAVAILABLE, "control plane shutting down", False),
    ],
)
async def test_a_live_tunnel_cut_for_revocation_is_final_and_other_cuts_are_not(
    code: ErrorCode, message: str, final: bool
) -> None:
    servers: list[asyncio.Task[None]] = []

    async def connect() -> Pipe:
        pipe = Pipe()
        servers.append(asyncio.create_task(_control(pipe, code, message)))
        return pipe

    link = _link(connect)
    runner = asyncio.create_task(link.run())
    if final:
        await asyncio.wait_for(runner, 5)
        assert (link.state, link.refusal, link.connections, len(servers)) == (
            LinkState.REFUSED,
            "revoked",
            1,
            1,
        )
    else:
        await eventually(lambda: link.connections >= 2)  # it came back
        assert link.refusal is None
        await link.drain(0)
        await asyncio.wait_for(runner, 5)
    for task in servers:
        task.cancel()
    await asyncio.gather(*servers, return_exceptions=True)


def test_the_systemd_unit_keeps_a_refused_edge_stopped() -> None:
    """`outpost-edge run` exits with EXIT_REFUSED when refused for good; the unit must not restart it."""
    from pathlib import Path

    from outpost_wire.cli_support import EXIT_REFUSED

    unit = (Path(__file__).resolve().parents[3] / "systemd" / "outpost-edge.service").read_text()
    lines = [line.strip() for line in unit.splitlines()]
    assert f"RestartPreventExitStatus={EXIT_REFUSED}" in lines and "Restart=on-failure" in lines
