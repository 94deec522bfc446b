"""The enrollment and operator routers through an in-process ASGI client: shapes and error mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from control_plane.api.auth import PUBLIC_PATHS, ApiKeyGate, create_api_key
from control_plane.api.enroll_routes import MAX_BODY_BYTES, enroll_router, operator_router
from control_plane.enroll import EnrollmentService
from control_plane.store import MemoryStore

from .conftest import ENV_ID, FakeClock
from .keys import ec_csr


@pytest.fixture
async def http(
    service: EnrollmentService, store: MemoryStore, clock: FakeClock
) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(enroll_router(service, tunnel_address="cp.test:7443"))
    app.include_router(operator_router(service))
    app.add_middleware(ApiKeyGate, store=store, public=PUBLIC_PATHS, clock=clock)  # the operator routes' key
    key, _ = await create_api_key(store, "admin", clock())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://cp.test",
        headers={"authorization": f"Bearer {key}"},
    ) as client:
        yield client


def _error(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    message: str = body["error"]["message"]
    return message


async def _token(http: httpx.AsyncClient, **body: object) -> dict[str, str]:
    response = await http.post(f"/v1/environments/{ENV_ID}/enrollment_tokens", json=body or None)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    data: dict[str, str] = response.json()
    return data


async def test_token_enroll_list_revoke(http: httpx.AsyncClient, clock: FakeClock) -> None:
    token = await _token(http, ttl_seconds=120)
    assert set(token) == {"id", "token", "environment_id", "expires_at", "ca_fingerprint"}
    assert token["expires_at"] == "2030-01-01T12:02:00Z"

    response = await http.post(
        "/v1/edges/enroll", json={"token": token["token"], "csr_pem": ec_csr()[1].decode(), "name": "box"}
    )
    assert response.status_code == 200, response.text
    enrolled = response.json()
    assert enrolled["environment_id"] == ENV_ID
    assert enrolled["tunnel_address"] == "cp.test:7443"
    assert enrolled["certificate_pem"].startswith("-----BEGIN CERTIFICATE-----")

    listing = (await http.get("/v1/edges", params={"environment_id": ENV_ID})).json()
    assert [e["id"] for e in listing["data"]] == [enrolled["edge_id"]]
    assert listing["has_more"] is False
    edge = listing["data"][0]
    assert edge["type"] == "edge" and edge["name"] == "box" and edge["revoked_at"] is None
    assert token["token"] not in str(listing)
    assert "PRIVATE" not in str(listing)
    assert (await http.get("/v1/edges", params={"environment_id": "env_other"})).json()["data"] == []

    revoked = (await http.post(f"/v1/edges/{enrolled['edge_id']}/revoke")).json()
    assert revoked["revoked_at"] == "2030-01-01T12:00:00Z"
    assert (await http.get(f"/v1/edges/{enrolled['edge_id']}")).json()["revoked_at"] is not None


async def test_token_default_ttl_without_body(http: httpx.AsyncClient) -> None:
    token = await _token(http)
    assert token["expires_at"] == "2030-01-01T13:00:00Z"


async def test_rejected_token_is_401(http: httpx.AsyncClient) -> None:
    body = {"token": "oet_nope", "csr_pem": ec_csr()[1].decode(), "name": "box"}
    message = _error(await http.post("/v1/edges/enroll", json=body), 401, "authentication_error")
    assert message == "enrollment token rejected: unknown"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"csr_pem": "x", "name": "b"}, "token: Field required"),
        ({"token": "t", "csr_pem": "x", "name": "b", "admin": True}, "admin"),
        ({"token": "t" * 600, "csr_pem": "x", "name": "b"}, "token: String should have at most 512"),
        ({"token": 5, "csr_pem": "x", "name": "b"}, "token:"),
        ([], "body:"),
    ],
)
async def test_bad_enroll_body_is_400(http: httpx.AsyncClient, body: object, needle: str) -> None:
    message = _error(await http.post("/v1/edges/enroll", json=body), 400, "invalid_request_error")
    assert needle in message
    assert "t" * 100 not in message  # input is never echoed


async def test_invalid_json_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/edges/enroll", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert "not valid JSON" in _error(response, 400, "invalid_request_error")


async def test_bad_csr_is_400(http: httpx.AsyncClient) -> None:
    token = await _token(http)
    body = {"token": token["token"], "csr_pem": "-----BEGIN CERTIFICATE REQUEST-----\n", "name": "b"}
    assert "csr_pem" in _error(await http.post("/v1/edges/enroll", json=body), 400, "invalid_request_error")


async def test_oversize_body_is_413(http: httpx.AsyncClient) -> None:
    body = b'{"token": "' + b"a" * MAX_BODY_BYTES + b'"}'
    response = await http.post("/v1/edges/enroll", content=body, headers={"content-type": "application/json"})
    _error(response, 413, "request_too_large")


async def test_operator_errors(http: httpx.AsyncClient) -> None:
    _error(await http.post("/v1/environments/env_missing/enrollment_tokens"), 404, "not_found_error")
    response = await http.post(f"/v1/environments/{ENV_ID}/enrollment_tokens", json={"ttl_seconds": -5})
    assert "ttl_seconds" in _error(response, 400, "invalid_request_error")
    _error(await http.post("/v1/edges/edge_missing/revoke"), 404, "not_found_error")
    _error(await http.get("/v1/edges/edge_missing"), 404, "not_found_error")
