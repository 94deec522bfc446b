"""Session: heartbeats and peer death on a fake clock."""

from __future__ import annotations

import math

import pytest

from outpost_wire import (
    PROTOCOL_VERSION,
    ConnState,
    Destroy,
    Heartbeat,
    PeerDead,
    Request,
    Role,
    SessionConfig,
    TunnelSession,
    Welcome,
)

from .pair import Pair, frames

CONFIG = SessionConfig(heartbeat_interval_s=10.0, heartbeat_timeout_s=30.0)


def test_heartbeat_after_silence_and_sequence_increments() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    assert pair.control.next_timer(0.0) == 10.0
    pair.control.tick(5.0)
    assert pair.control.data_to_send() == []
    pair.edge.sandboxes_in_use = 3
    pair.control.tick(10.0)
    pair.edge.tick(10.0)
    assert frames(pair.control) == [Heartbeat(1, 10_000, 0)]
    assert frames(pair.edge) == [Heartbeat(1, 10_000, 3)]
    pair.control.tick(20.0)
    assert frames(pair.control) == [Heartbeat(2, 20_000, 0)]
    assert pair.control.next_timer(20.0) == 30.0


def test_received_heartbeat_refreshes_liveness_and_is_recorded() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    pair.edge.sandboxes_in_use = 2
    for t in (10.0, 20.0, 30.0, 40.0):
        pair.now = t
        pair.edge.tick(t)
        pair.control.tick(t)
        pair.pump()
    assert pair.control.state is pair.edge.state is ConnState.OPEN
    assert pair.control.last_peer_heartbeat == Heartbeat(4, 40_000, 2)
    assert pair.take_control_events() == [] and pair.take_edge_events() == []


def test_other_traffic_postpones_heartbeat() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    pair.now = 9.0
    pair.control.tick(9.0)  # tells the session the time; nothing due yet
    pair.control.send_request(Request("r1", "s", "k", 0, Destroy()))
    pair.pump()
    pair.control.tick(10.0)
    assert pair.control.data_to_send() == []  # the request counted as traffic
    assert pair.control.next_timer(10.0) == 19.0


def test_peer_dead_after_timeout_emitted_once() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    for t in (10.0, 20.0):
        pair.control.tick(t)
    pair.control.data_to_send()
    assert pair.control.next_timer(20.0) == 30.0  # the liveness deadline comes before the next beat
    pair.control.tick(29.9)
    assert pair.control.events_received() == []
    pair.control.tick(30.0)
    assert pair.control.events_received() == [PeerDead()]
    assert pair.control.state is ConnState.CLOSED
    assert pair.control.data_to_send() == []  # no heartbeat to a dead peer
    pair.control.tick(100.0)
    assert pair.control.events_received() == []
    assert pair.control.next_timer(100.0) == math.inf


def test_silent_peer_during_handshake_is_dead_too() -> None:
    control = TunnelSession(Role.CONTROL, CONFIG)
    assert control.next_timer(0.0) == math.inf
    control.connection_made(100.0)
    assert control.next_timer(100.0) == 130.0  # no heartbeats before OPEN, only the deadline
    control.tick(129.0)
    assert control.data_to_send() == []
    control.tick(130.0)
    assert control.events_received() == [PeerDead()]


def test_edge_adopts_shorter_interval_from_welcome() -> None:
    pair = Pair(CONFIG)
    pair.connect(Welcome("cp", "1", PROTOCOL_VERSION, 2.0))
    assert pair.edge.heartbeat_interval_s == 2.0
    assert pair.edge.next_timer(0.0) == 2.0
    pair.edge.tick(2.0)
    assert [type(f) for f in frames(pair.edge)] == [Heartbeat]
    assert pair.control.heartbeat_interval_s == 10.0


def test_edge_keeps_its_own_interval_if_welcome_is_longer() -> None:
    pair = Pair(CONFIG)
    pair.connect(Welcome("cp", "1", PROTOCOL_VERSION, 60.0))
    assert pair.edge.heartbeat_interval_s == 10.0


def test_next_timer_never_in_the_past() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    assert pair.control.next_timer(50.0) == 50.0


def test_reconnect_resets_liveness_clock() -> None:
    pair = Pair(CONFIG)
    pair.connect()
    pair.control.tick(30.0)
    assert pair.control.events_received() == [PeerDead()]
    pair.disconnect()
    pair.now = 40.0
    pair.connect()
    pair.control.tick(60.0)
    assert pair.control.state is ConnState.OPEN


@pytest.mark.parametrize(
    "bad",
    [
        {"max_frame_bytes": 0},
        {"heartbeat_interval_s": -1.0},
        {"heartbeat_timeout_s": float("nan")},
        {"max_result_bytes": 0},
    ],
)
def test_config_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SessionConfig(**bad)  # type: ignore[arg-type]
