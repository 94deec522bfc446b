"""Issue 2 end to end: the link and the edge process fail, and nothing is lost or run twice."""

from __future__ import annotations

import asyncio
import datetime as dt

import docker
import grpc
import grpc.aio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from control_plane.server import ControlPlane
from edge_agent.connection import TransportError, connect_grpc
from outpost_wire.channel import CONNECT_METHOD
from tests.support import eventually
from tests.support.docker_engine import exists_in_session_sandbox
from tests.support.e2e import Api, text_of

pytestmark = pytest.mark.docker

COUNTER = "echo run >> /workspace/counter; wc -l < /workspace/counter"


async def _connected(api: Api, edge_id: str) -> bool:
    data = await api.get("/v1/connected_edges")
    return any(s["edge_id"] == edge_id for s in data["data"])


async def test_edge_kill9_restart_keeps_results_and_runs_nothing_twice(
    api: Api, environment: str, enroll, edge_processes, docker_client: docker.DockerClient
) -> None:
    edge = await enroll(environment)
    edge_id = edge.identity.edge_id
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge_id), what="edge connected")
    first = await api.exec(environment, "s-crash", "bash", {"command": COUNTER}, key="toolu_counter_1")
    assert text_of(first).strip() == "1"

    proc.kill9()
    await eventually(lambda: _not(_connected(api, edge_id)), what="edge gone")
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge_id), what="edge reconnected")

    # The repeated key answers from the edge's journal: same output, the command did not run again.
    again = await api.exec(environment, "s-crash", "bash", {"command": COUNTER}, key="toolu_counter_1")
    assert text_of(again).strip() == "1"
    check = await api.exec(environment, "s-crash", "bash", {"command": "wc -l < /workspace/counter"})
    assert text_of(check).strip() == "1"
    # The sandbox was reattached, not replaced: one container for the session.
    labels = [f"outpost.edge_id={edge_id}", "outpost.session_id=s-crash"]
    assert len(docker_client.containers.list(all=True, filters={"label": labels})) == 1

    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-crash"})
    assert proc.terminate() == 0
    assert not docker_client.containers.list(all=True, filters={"label": f"outpost.edge_id={edge_id}"})


async def test_restart_reconciles_dead_containers(
    api: Api, environment: str, enroll, edge_processes, docker_client: docker.DockerClient
) -> None:
    edge = await enroll(environment)
    edge_id = edge.identity.edge_id
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge_id), what="edge connected")
    await api.exec(environment, "s-dead", "bash", {"command": "true"})
    proc.kill9()
    [container] = docker_client.containers.list(filters={"label": f"outpost.edge_id={edge_id}"})
    container.kill()
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge_id), what="edge reconnected")
    # The dead container was garbage-collected at start; the workspace volume is kept for the session.
    assert not docker_client.containers.list(all=True, filters={"label": f"outpost.edge_id={edge_id}"})
    out = await api.exec(environment, "s-dead", "bash", {"command": "echo back"})
    assert text_of(out).strip() == "back"
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-dead"})
    proc.terminate()


async def test_sigterm_drains_in_flight_calls(
    api: Api, environment: str, enroll, edge_processes, docker_client: docker.DockerClient
) -> None:
    edge = await enroll(environment)
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge.identity.edge_id), what="edge connected")
    await api.exec(environment, "s-drain", "bash", {"command": "true"})  # warm
    call = asyncio.create_task(
        api.exec(
            environment, "s-drain", "bash", {"command": "touch /workspace/started; sleep 2; echo finished"}
        )
    )
    await eventually(
        lambda: exists_in_session_sandbox(docker_client, "s-drain", "/workspace/started"),
        what="the call running in the sandbox",
    )
    code = await asyncio.to_thread(proc.terminate)
    result = await call
    assert not result["is_error"] and text_of(result).strip() == "finished", result
    assert code == 0, proc.log()
    # Clean up with a fresh edge process (the sandbox outlives the drained one and is reattached).
    proc = edge_processes(edge)
    await eventually(lambda: _connected(api, edge.identity.edge_id), what="edge back")
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-drain"})
    proc.terminate()


async def test_revoking_an_edge_cuts_its_tunnel(api: Api, environment: str, enroll, run_edge) -> None:
    agent = await run_edge(await enroll(environment))
    other = await run_edge(await enroll(environment))
    await api.post(f"/v1/edges/{agent.edge_id}/revoke")
    await eventually(lambda: _not(_connected(api, agent.edge_id)), what="revoked edge disconnected")

    async def refused() -> bool:
        return agent.link is not None and "UNAUTHENTICATED" in (agent.link.last_error or "")

    await eventually(refused, what="tunnel refused as UNAUTHENTICATED")
    assert agent.link is not None and agent.link.refusal == "revoked"  # final: no reconnect
    assert await _connected(api, other.edge_id)


async def test_certificate_not_issued_by_the_control_plane_is_refused(
    control_plane: ControlPlane, api: Api, environment: str, enroll, run_edge
) -> None:
    good = await run_edge(await enroll(environment))
    key_pem, cert_pem = _foreign_client_cert()
    with pytest.raises(TransportError):
        transport = await connect_grpc(
            control_plane.tunnel_address,
            ca_pem=control_plane.ca.ca_cert_pem,  # type: ignore[union-attr]
            key_pem=key_pem,
            cert_pem=cert_pem,
            max_frame_bytes=4 * 1024 * 1024,
            keepalive_time_s=20,
            connect_timeout_s=3,
        )
        await transport.send(b"\x00")
        await transport.receive()
    out = await api.exec(environment, "s-foreign", "bash", {"command": "echo still serving"})
    assert text_of(out).strip() == "still serving"
    assert await _connected(api, good.edge_id)
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-foreign"})


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"\xff\xfe garbage that is not a frame", "malformed_frame"),
        (b"\x00" * (5 * 1024 * 1024), "frame_too_large"),
    ],
    ids=["malformed", "oversized"],
)
async def test_bad_frames_get_a_typed_error_and_others_keep_working(
    control_plane: ControlPlane, api: Api, environment: str, enroll, run_edge, payload: bytes, expected: str
) -> None:
    good = await run_edge(await enroll(environment))
    rogue = (await enroll(environment)).identity
    credentials = grpc.ssl_channel_credentials(rogue.ca_pem, rogue.key_pem, rogue.cert_pem)
    async with grpc.aio.secure_channel(
        control_plane.tunnel_address,
        credentials,
        options=[("grpc.max_send_message_length", 16 * 1024 * 1024)],
    ) as channel:
        call = channel.stream_stream(CONNECT_METHOD, request_serializer=None, response_deserializer=None)()
        await call.write(payload)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            while True:
                if await call.read() is grpc.aio.EOF:
                    break
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert expected in (info.value.details() or "")
    out = await api.exec(environment, "s-rogue", "bash", {"command": "echo ok"})
    assert text_of(out).strip() == "ok"
    assert await _connected(api, good.edge_id)
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-rogue"})


async def _not(aw: object) -> bool:
    return not await aw  # type: ignore[misc]


def _foreign_client_cert() -> tuple[bytes, bytes]:
    """A CA of our own making and a client certificate it signed: valid TLS, wrong issuer."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Mallory CA")])
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge_mallory")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)
