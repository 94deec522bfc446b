"""Two TunnelSessions wired back to back in memory, with a fake clock."""

from __future__ import annotations

from outpost_wire import (
    PROTOCOL_VERSION,
    Event,
    Frame,
    Hello,
    HelloReceived,
    Role,
    SessionConfig,
    TunnelSession,
    Welcome,
    WelcomeReceived,
    decode_frame,
)

HELLO = Hello(
    edge_id="edge-1",
    software_version="0.1.0",
    protocol_version=PROTOCOL_VERSION,
    capabilities=("docker", "mcp"),
    policy_digest="sha256:abc",
    sandbox_capacity=8,
    sandboxes_in_use=0,
    environment_id="env-1",
)
WELCOME = Welcome(
    control_plane_id="cp-1",
    software_version="0.1.0",
    protocol_version=PROTOCOL_VERSION,
    heartbeat_interval_s=10.0,
)


class Pair:
    """An EDGE and a CONTROL session; ``pump()`` moves frames both ways until both are quiet."""

    def __init__(
        self, config: SessionConfig | None = None, control_config: SessionConfig | None = None
    ) -> None:
        self.config = config or SessionConfig()
        self.edge = TunnelSession(Role.EDGE, self.config)
        self.control = TunnelSession(Role.CONTROL, control_config or self.config)
        self.now = 0.0
        self.edge_events: list[Event] = []
        self.control_events: list[Event] = []

    def connect(self, welcome: Welcome = WELCOME) -> None:
        self.edge.connection_made(self.now)
        self.control.connection_made(self.now)
        self.edge.send_hello(HELLO)
        self.pump()
        self.control.send_welcome(welcome)
        self.pump()
        # The handshake's own events are not what tests look at; drop them.
        self.edge_events = [e for e in self.edge_events if not isinstance(e, WelcomeReceived)]
        self.control_events = [e for e in self.control_events if not isinstance(e, HelloReceived)]

    def disconnect(self) -> None:
        self.edge.connection_lost()
        self.control.connection_lost()

    def pump(self) -> None:
        while True:
            to_control = self.edge.data_to_send()
            to_edge = self.control.data_to_send()
            if not to_control and not to_edge:
                break
            for data in to_control:
                self.control.receive_data(data, self.now)
            for data in to_edge:
                self.edge.receive_data(data, self.now)
            self.collect()
        self.collect()

    def collect(self) -> None:
        self.edge_events += self.edge.events_received()
        self.control_events += self.control.events_received()

    def take_edge_events(self) -> list[Event]:
        self.collect()
        out, self.edge_events = self.edge_events, []
        return out

    def take_control_events(self) -> list[Event]:
        self.collect()
        out, self.control_events = self.control_events, []
        return out


def frames(session: TunnelSession, max_frame_bytes: int | None = None) -> list[Frame]:
    """Drain and decode what ``session`` wants to send."""
    limit = max_frame_bytes or session.config.max_frame_bytes
    return [decode_frame(data, limit) for data in session.data_to_send()]
