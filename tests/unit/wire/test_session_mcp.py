"""Session: the MCP catalog (Hello fields, CatalogUpdate / CatalogReceived), McpCall and
Execute.sandbox through two sessions back to back."""

from __future__ import annotations

import dataclasses

import pytest

from outpost_wire import (
    CatalogReceived,
    CatalogUpdate,
    ConnState,
    Egress,
    ErrorCode,
    ErrorFrame,
    Execute,
    Failure,
    FrameTooLarge,
    HelloReceived,
    MalformedFrame,
    McpCall,
    ProtocolError,
    ProtocolViolation,
    Provision,
    Request,
    RequestReceived,
    ResultReceived,
    Role,
    SessionConfig,
    ToolResult,
    TunnelSession,
    encode_frame,
)

from .pair import HELLO, WELCOME, Pair, frames

LIMIT = SessionConfig().max_frame_bytes
CATALOG_V1 = '{"servers": [{"name": "github", "tools": ["search"]}]}'
CATALOG_V2 = '{"servers": [{"name": "github", "tools": ["search", "create_issue"]}]}'
HELLO_WITH_CATALOG = dataclasses.replace(HELLO, mcp_catalog_digest="sha256:v1", mcp_catalog_json=CATALOG_V1)


def _state(session: TunnelSession) -> ConnState:
    return session.state  # a call, so that mypy does not narrow across transitions


# --- the catalog -----------------------------------------------------------------------------------


def test_hello_carries_the_catalog() -> None:
    pair = Pair()
    pair.edge.connection_made(0.0)
    pair.control.connection_made(0.0)
    pair.edge.send_hello(HELLO_WITH_CATALOG)
    pair.pump()
    assert pair.take_control_events() == [HelloReceived(HELLO_WITH_CATALOG)]
    assert pair.control.peer_hello is not None
    assert pair.control.peer_hello.mcp_catalog_digest == "sha256:v1"
    assert pair.control.peer_hello.mcp_catalog_json == CATALOG_V1


def test_catalog_updates_reach_control_in_order() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.send_catalog("sha256:v2", CATALOG_V2)
    pair.edge.send_catalog("sha256:v1", CATALOG_V1)
    pair.edge.send_catalog("", "")  # opaque: the wire package does not judge the catalog
    pair.pump()
    assert pair.take_control_events() == [
        CatalogReceived("sha256:v2", CATALOG_V2),
        CatalogReceived("sha256:v1", CATALOG_V1),
        CatalogReceived("", ""),
    ]
    assert pair.take_edge_events() == []  # no ack or anything else comes back
    assert pair.edge.state is pair.control.state is ConnState.OPEN


@pytest.mark.parametrize("drained_by", list(Role))
def test_catalog_update_while_draining(drained_by: Role) -> None:
    pair = Pair()
    pair.connect()
    (pair.edge if drained_by is Role.EDGE else pair.control).send_drain("deploy", 1000)
    pair.pump()
    pair.take_edge_events()
    pair.take_control_events()
    assert pair.edge.state is pair.control.state is ConnState.DRAINING
    pair.edge.send_catalog("sha256:v2", CATALOG_V2)
    pair.pump()
    assert pair.take_control_events() == [CatalogReceived("sha256:v2", CATALOG_V2)]


def test_catalog_update_crossing_a_control_drain() -> None:
    pair = Pair()
    pair.connect()
    pair.control.send_drain("deploy", 1000)
    pair.edge.send_catalog("sha256:v2", CATALOG_V2)  # the edge is still OPEN
    pair.pump()
    assert pair.take_control_events() == [CatalogReceived("sha256:v2", CATALOG_V2)]
    assert pair.control.state is ConnState.DRAINING


def test_send_catalog_counts_as_traffic() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.tick(9.0)
    pair.edge.send_catalog("d", "{}")
    assert pair.edge.next_timer(9.0) == pytest.approx(19.0)


def test_send_catalog_is_edge_only() -> None:
    pair = Pair()
    pair.connect()
    with pytest.raises(ProtocolViolation):
        pair.control.send_catalog("d", "{}")
    assert pair.control.data_to_send() == []


def test_send_catalog_requires_open_or_draining() -> None:
    edge = TunnelSession(Role.EDGE, SessionConfig())
    with pytest.raises(ProtocolViolation):
        edge.send_catalog("d", "{}")  # DISCONNECTED
    edge.connection_made(0.0)
    edge.send_hello(HELLO)
    with pytest.raises(ProtocolViolation):
        edge.send_catalog("d", "{}")  # HANDSHAKING: the catalog belongs in Hello
    edge.close()
    with pytest.raises(ProtocolViolation):
        edge.send_catalog("d", "{}")  # CLOSED
    assert [type(f).__name__ for f in frames(edge)] == ["Hello"]


def test_oversized_catalog_raises_at_send_and_keeps_the_session() -> None:
    pair = Pair(SessionConfig(max_frame_bytes=1024))
    pair.connect()
    with pytest.raises(FrameTooLarge):
        pair.edge.send_catalog("d", "x" * 1024)
    assert pair.edge.data_to_send() == []
    assert pair.edge.state is ConnState.OPEN
    pair.edge.send_catalog("d", "x" * 900)  # one that fits still goes
    pair.pump()
    assert pair.take_control_events() == [CatalogReceived("d", "x" * 900)]


def test_edge_rejects_a_catalog_update() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.receive_data(encode_frame(CatalogUpdate("d", "{}"), LIMIT), 1.0)
    [event] = pair.edge.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION
    assert pair.edge.state is ConnState.CLOSED
    assert frames(pair.edge) == [ErrorFrame(ErrorCode.PROTOCOL_VIOLATION, event.message)]


@pytest.mark.parametrize("after_hello", [False, True], ids=["before-hello", "after-hello"])
def test_control_rejects_a_catalog_update_before_open(after_hello: bool) -> None:
    control = TunnelSession(Role.CONTROL, SessionConfig())
    control.connection_made(0.0)
    if after_hello:
        control.receive_data(encode_frame(HELLO, LIMIT), 0.0)
        assert control.events_received() == [HelloReceived(HELLO)]
    control.receive_data(encode_frame(CatalogUpdate("d", "{}"), LIMIT), 0.5)
    [event] = control.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION
    assert _state(control) is ConnState.CLOSED
    with pytest.raises(ProtocolViolation):
        control.send_welcome(WELCOME)


def test_catalog_after_reconnect() -> None:
    pair = Pair()
    pair.connect()
    pair.disconnect()
    with pytest.raises(ProtocolViolation):
        pair.edge.send_catalog("d", "{}")  # not re-sent or queued by the session: Hello carries it
    pair.now = 1.0
    pair.connect()
    pair.edge.send_catalog("sha256:v2", CATALOG_V2)
    pair.pump()
    assert pair.take_control_events() == [CatalogReceived("sha256:v2", CATALOG_V2)]


# --- McpCall and Execute.sandbox --------------------------------------------------------------------


MCP_REQUEST = Request("r1", "s1", "toolu_1", 0, McpCall("github", "search", '{"q": "outpost"}', 5000))


@pytest.mark.parametrize(
    "outcome",
    [
        ToolResult.text('{"items": []}'),
        ToolResult.error("rate limited"),  # a tool-level error
        Failure(ErrorCode.MCP_CONNECTION_FAILED, "github: connection refused"),
    ],
    ids=["result", "tool-error", "connection-failed"],
)
def test_mcp_call_round_trip(outcome: ToolResult | Failure) -> None:
    pair = Pair()
    pair.connect()
    pair.control.send_request(MCP_REQUEST)
    pair.pump()
    assert pair.take_edge_events() == [RequestReceived(MCP_REQUEST)]
    pair.edge.send_result("r1", outcome)
    pair.pump()
    assert pair.take_control_events() == [ResultReceived("r1", outcome)]
    assert pair.edge.unacked_results() == []


def test_execute_with_sandbox_reaches_the_edge() -> None:
    sandbox = Provision("python:3.12", 2.0, 2**30, 128, Egress("allowlist", ("pypi.org",)))
    request = Request(
        "r1", "s1", "toolu_1", 0, Execute("bash", '{"command": "pip install x"}', sandbox=sandbox)
    )
    pair = Pair()
    pair.connect()
    pair.control.send_request(request)
    pair.pump()
    [event] = pair.take_edge_events()
    assert event == RequestReceived(request)
    assert isinstance(event, RequestReceived) and isinstance(event.request.op, Execute)
    assert event.request.op.sandbox == sandbox


def test_send_request_rejects_a_bad_egress_at_the_sender() -> None:
    pair = Pair()
    pair.connect()
    bad = Request("r1", "s1", "k", 0, Provision(egress=Egress("everything")))
    with pytest.raises(MalformedFrame):
        pair.control.send_request(bad)
    assert pair.control.data_to_send() == []
    assert pair.control.state is ConnState.OPEN
