"""HTTP routes for enrollment (edge-facing) and edge management (operator-facing).

Two routers, both free of API-key auth; the application mounts them:

* :func:`enroll_router` — ``POST /v1/edges/enroll``, ``GET /v1/edges/enroll/ca`` (the CA
  certificate) and ``POST /v1/edges/renew``. Public: the enrollment token in the body is the
  credential, or for a renewal the edge's proof-of-possession token (``Authorization: Outpost-PoP
  <token>``, made with its current certificate). Mount it *outside* the API-key middleware.
* :func:`operator_router` — ``POST /v1/environments/{id}/enrollment_tokens``,
  ``GET /v1/enrollment_tokens``, ``POST /v1/enrollment_tokens/{id}/revoke``, ``GET /v1/edges``,
  ``GET /v1/edges/{id}``, ``POST /v1/edges/{id}/revoke``. Mount it *behind* the API-key middleware.
  An environment-scoped key sees only its environments' tokens and edges (others are a 404, as
  if unknown; see :mod:`control_plane.api.caller`).
  Edges come with their live status (connected, since, last seen, software version, sandboxes,
  which control-plane process holds the tunnel: :mod:`control_plane.api.fleet`).

Errors use the Anthropic API shape ``{"type": "error", "error": {"type": ..., "message": ...}}``:
400 ``invalid_request_error`` (bad body, query or CSR), 401 ``authentication_error`` (token rejected:
unknown / revoked / expired / used; for a renewal, the proof of possession or the edge's
certificate refused, with the reason), 404 ``not_found_error``, 413 ``request_too_large``. The
routers map these themselves (through their route class), so they do not depend on the
application's handlers; those map the rest (409 ``conflict_error``: revoking a used token). Error
messages never echo request input, so a token cannot leak into a response or a log through them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Message

from control_plane.api.caller import Caller, CallerDep
from control_plane.api.fleet import EdgeLive, EnrollmentTokenInfo, EnrollmentTokenList, FleetView
from control_plane.enroll.service import MAX_TOKEN_TTL_S, EdgeAuthError, EnrollmentService
from control_plane.errors import InvalidRequest, NotFound, TokenRejected
from control_plane.store.base import EdgeRecord, EnrollmentTokenRecord
from outpost_wire.pop import AUTH_SCHEME, PopError

__all__ = [
    "MAX_BODY_BYTES",
    "AnthropicErrorRoute",
    "CaCertificate",
    "CreateEnrollmentTokenRequest",
    "EdgeList",
    "EdgeObject",
    "EnrollRequest",
    "EnrollResponse",
    "EnrollmentTokenObject",
    "ErrorDetail",
    "ErrorResponse",
    "RenewRequest",
    "RenewResponse",
    "enroll_router",
    "error_response",
    "operator_router",
]

MAX_BODY_BYTES = 64 * 1024


# -- wire models -----------------------------------------------------------------------------------------
class EnrollRequest(BaseModel):
    """Body of ``POST /v1/edges/enroll``."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=512)
    csr_pem: str = Field(min_length=1, max_length=16 * 1024)
    name: str = Field(min_length=1, max_length=128)


class EnrollResponse(BaseModel):
    """Answer to a successful enrollment: the edge's certificate and the CA to trust."""

    edge_id: str
    environment_id: str
    certificate_pem: str
    ca_certificate_pem: str
    tunnel_address: str | None = None  # where the edge dials the tunnel, if the control plane says


class RenewRequest(BaseModel):
    """Body of ``POST /v1/edges/renew`` (the credential is the ``Authorization`` header)."""

    model_config = ConfigDict(extra="forbid")

    csr_pem: str = Field(min_length=1, max_length=16 * 1024)


class RenewResponse(BaseModel):
    """Answer to a successful renewal: the edge's new certificate (same edge, same environment)."""

    edge_id: str
    certificate_pem: str
    ca_certificate_pem: str
    not_after: datetime


class CaCertificate(BaseModel):
    """Answer to ``GET /v1/edges/enroll/ca``: the control plane's CA certificate."""

    ca_certificate_pem: str


class CreateEnrollmentTokenRequest(BaseModel):
    """Body of ``POST /v1/environments/{environment_id}/enrollment_tokens`` (optional)."""

    model_config = ConfigDict(extra="forbid")

    ttl_seconds: float | None = Field(default=None, gt=0, le=MAX_TOKEN_TTL_S)


class EnrollmentTokenObject(BaseModel):
    """A new enrollment token; ``token`` is shown only in this response."""

    id: str
    token: str
    environment_id: str
    expires_at: datetime
    ca_fingerprint: str


class EdgeObject(BaseModel):
    """An enrolled edge, as the operator API shows it (no secrets), with its live status."""

    type: Literal["edge"] = "edge"
    id: str
    environment_id: str
    name: str
    cert_serial: str
    cert_fingerprint: str
    created_at: datetime
    cert_not_after: datetime
    revoked_at: datetime | None = None
    connected: bool = False
    connected_at: datetime | None = None  # known on the process holding the tunnel
    last_seen_at: datetime | None = None
    control_plane_id: str | None = None  # the process holding the tunnel
    software_version: str | None = None
    sandboxes_in_use: int | None = None
    sandbox_capacity: int | None = None
    draining: bool | None = None
    peer: str | None = None

    @classmethod
    def from_record(cls, record: EdgeRecord, live: EdgeLive | None = None) -> EdgeObject:
        """Convert a store record, with the edge's live status if known."""
        live = live or EdgeLive(last_seen_at=record.last_seen_at)
        return cls(
            id=record.id,
            environment_id=record.environment_id,
            name=record.name,
            cert_serial=record.cert_serial,
            cert_fingerprint=record.cert_fingerprint,
            created_at=record.created_at,
            cert_not_after=record.cert_not_after,
            revoked_at=record.revoked_at,
            connected=live.connected,
            connected_at=live.connected_at,
            last_seen_at=live.last_seen_at,
            control_plane_id=live.control_plane_id,
            software_version=live.software_version,
            sandboxes_in_use=live.sandboxes_in_use,
            sandbox_capacity=live.sandbox_capacity,
            draining=live.draining,
            peer=live.peer,
        )


class EdgeList(BaseModel):
    """A list of edges in the Anthropic list shape (one page: ``has_more`` is always false)."""

    data: list[EdgeObject]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


class ErrorDetail(BaseModel):
    """The ``error`` member of an error response."""

    type: str
    message: str


class ErrorResponse(BaseModel):
    """An error in the Anthropic API shape."""

    type: Literal["error"] = "error"
    error: ErrorDetail


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "invalid_request_error"},
    404: {"model": ErrorResponse, "description": "not_found_error"},
    413: {"model": ErrorResponse, "description": "request_too_large"},
}
_TOKEN_REVOKE_ERRORS: dict[int | str, dict[str, Any]] = {
    404: _ERRORS[404],
    409: {"model": ErrorResponse, "description": "conflict_error: the token was used already"},
}
_ENROLL_ERRORS: dict[int | str, dict[str, Any]] = {
    400: _ERRORS[400],
    401: {
        "model": ErrorResponse,
        "description": "authentication_error: token unknown, revoked, expired or used",
    },
    413: _ERRORS[413],
}
_RENEW_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "invalid_request_error: bad body or CSR"},
    401: {
        "model": ErrorResponse,
        "description": "authentication_error: proof of possession refused, or the edge's certificate "
        "is no longer accepted (revoked, expired, replaced), with the reason",
    },
    413: _ERRORS[413],
}


# -- error mapping -----------------------------------------------------------------------------------------
class _BodyTooLarge(Exception):
    pass


def error_response(status_code: int, error_type: str, message: str) -> JSONResponse:
    """An Anthropic-shaped error response."""
    body = ErrorResponse(error=ErrorDetail(type=error_type, message=message))
    return JSONResponse(body.model_dump(mode="json"), status_code=status_code)


def _describe_validation(exc: RequestValidationError) -> str:
    """First validation problem as ``field: message``; never includes the offending input."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    where = ".".join(loc) if loc and not loc[0].isdigit() else "body"
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        message = "body is not valid JSON"
    return f"{where}: {message}"


async def _read_limited(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise _BodyTooLarge
    return bytes(body)


class AnthropicErrorRoute(APIRoute):
    """Route class that caps the body at :data:`MAX_BODY_BYTES` and renders errors in the Anthropic
    shape. Control-plane errors it does not know are re-raised for the application to handle."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                body = await _read_limited(request)
            except _BodyTooLarge:
                return error_response(
                    413, "request_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes"
                )
            replayed = False

            async def receive() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await request.receive()

            try:
                return await handler(Request(request.scope, receive))
            except RequestValidationError as exc:
                return error_response(400, "invalid_request_error", _describe_validation(exc))
            except (TokenRejected, EdgeAuthError, PopError) as exc:
                return error_response(401, "authentication_error", str(exc))
            except InvalidRequest as exc:
                return error_response(400, "invalid_request_error", str(exc))
            except NotFound as exc:
                return error_response(404, "not_found_error", str(exc))

        return handle


# -- routers ---------------------------------------------------------------------------------------------
def enroll_router(service: EnrollmentService, *, tunnel_address: str | None = None) -> APIRouter:
    """``POST /v1/edges/enroll``: exchange a token and a CSR for a client certificate.

    ``tunnel_address`` (``host:port``), if given, is returned to the edge as where to dial the tunnel.
    """
    router = APIRouter(route_class=AnthropicErrorRoute, tags=["enrollment"])

    @router.post("/v1/edges/enroll", response_model=EnrollResponse, responses=_ENROLL_ERRORS)
    async def enroll_edge(body: EnrollRequest) -> EnrollResponse:
        enrolled = await service.enroll(body.token, body.csr_pem.encode("utf-8"), body.name)
        return EnrollResponse(
            edge_id=enrolled.edge_id,
            environment_id=enrolled.environment_id,
            certificate_pem=enrolled.certificate_pem.decode("ascii"),
            ca_certificate_pem=enrolled.ca_certificate_pem.decode("ascii"),
            tunnel_address=tunnel_address,
        )

    @router.post("/v1/edges/renew", response_model=RenewResponse, responses=_RENEW_ERRORS)
    async def renew_certificate(body: RenewRequest, request: Request) -> RenewResponse:
        """A new certificate for the edge that signed the proof-of-possession token, over the key
        in the CSR; its previous certificate stays accepted until it uses the new one."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = token.strip() if scheme.lower() == AUTH_SCHEME.lower() else None
        renewed = await service.renew(given or None, body.csr_pem.encode("utf-8"))
        return RenewResponse(
            edge_id=renewed.edge_id,
            certificate_pem=renewed.certificate_pem.decode("ascii"),
            ca_certificate_pem=renewed.ca_certificate_pem.decode("ascii"),
            not_after=renewed.not_after,
        )

    @router.get("/v1/edges/enroll/ca", response_model=CaCertificate)
    async def enrollment_ca() -> CaCertificate:
        """The CA certificate (public): a registering edge reads it, checks it against its pinned
        fingerprint, then verifies the HTTPS server with it before sending its token."""
        return CaCertificate(ca_certificate_pem=service.ca.ca_cert_pem.decode("ascii"))

    return router


def _utcnow() -> datetime:
    return datetime.now(UTC)


_Rec = TypeVar("_Rec", EdgeRecord, EnrollmentTokenRecord)


class _OperatorRoutes:
    """The operator routes: enrollment tokens and edges, as far as the caller's key sees them
    (others are a 404, as if unknown); edges with their live status from ``fleet``."""

    def __init__(
        self, service: EnrollmentService, fleet: FleetView | None, clock: Callable[[], datetime]
    ) -> None:
        self._service = service
        self._fleet = fleet
        self._clock = clock

    async def create_enrollment_token(
        self,
        environment_id: str,
        response: Response,
        caller: CallerDep,
        body: CreateEnrollmentTokenRequest | None = None,
    ) -> EnrollmentTokenObject:
        caller.check_environment(environment_id, NotFound("environment", environment_id))
        ttl_s = body.ttl_seconds if body is not None and body.ttl_seconds is not None else 3600.0
        issued = await self._service.create_token(environment_id, ttl_s=ttl_s)
        response.headers["Cache-Control"] = "no-store"
        return EnrollmentTokenObject(
            id=issued.token_id,
            token=issued.token,
            environment_id=issued.environment_id,
            expires_at=issued.expires_at,
            ca_fingerprint=issued.ca_fingerprint,
        )

    async def list_enrollment_tokens(
        self, caller: CallerDep, environment_id: str | None = None
    ) -> EnrollmentTokenList:
        """Every enrollment token (of one environment), oldest first, with its status; never the
        token itself."""
        now = self._clock()
        records = await _visible(caller, environment_id, self._service.list_tokens)
        tokens = [EnrollmentTokenInfo.from_record(r, now) for r in records]
        return EnrollmentTokenList(
            data=tokens, first_id=tokens[0].id if tokens else None, last_id=tokens[-1].id if tokens else None
        )

    async def revoke_enrollment_token(self, token_id: str, caller: CallerDep) -> EnrollmentTokenInfo:
        """Withdraw an unused token: it enrolls nothing from now on."""
        if caller.environment_ids is not None and all(
            r.id != token_id for r in await _visible(caller, None, self._service.list_tokens)
        ):
            raise NotFound("enrollment token", token_id)
        return EnrollmentTokenInfo.from_record(await self._service.revoke_token(token_id), self._clock())

    async def list_edges(self, caller: CallerDep, environment_id: str | None = None) -> EdgeList:
        edges = await self._edge_objects(await _visible(caller, environment_id, self._service.list_edges))
        return EdgeList(
            data=edges, first_id=edges[0].id if edges else None, last_id=edges[-1].id if edges else None
        )

    async def get_edge(self, edge_id: str, caller: CallerDep) -> EdgeObject:
        [edge] = await self._edge_objects([await self._edge_of(caller, edge_id)])
        return edge

    async def revoke_edge(self, edge_id: str, caller: CallerDep) -> EdgeObject:
        await self._edge_of(caller, edge_id)
        [edge] = await self._edge_objects([await self._service.revoke(edge_id)])
        return edge

    async def _edge_of(self, caller: Caller, edge_id: str) -> EdgeRecord:
        record = await self._service.get_edge(edge_id)
        caller.check_environment(record.environment_id, NotFound("edge", edge_id))
        return record

    async def _edge_objects(self, records: list[EdgeRecord]) -> list[EdgeObject]:
        live = await self._fleet.live(records) if self._fleet is not None else {}
        return [EdgeObject.from_record(r, live.get(r.id)) for r in records]


async def _visible(
    caller: Caller, environment_id: str | None, lister: Callable[[str | None], Awaitable[list[_Rec]]]
) -> list[_Rec]:
    """What ``lister`` lists (of one environment, if given) that the caller's key sees, oldest
    first; an environment it does not see lists nothing, like an unknown one."""
    allowed = caller.environment_ids
    if allowed is None:
        return await lister(environment_id)
    if environment_id is not None:
        return await lister(environment_id) if environment_id in allowed else []
    found = [r for env in sorted(allowed) for r in await lister(env)]
    return sorted(found, key=lambda r: (r.created_at, r.id))


def operator_router(
    service: EnrollmentService,
    *,
    fleet: FleetView | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> APIRouter:
    """Operator routes: issue, list and revoke enrollment tokens; list and revoke edges, with their
    live status from ``fleet`` (none: registry fields only). Mount behind API-key auth."""
    routes = _OperatorRoutes(service, fleet, clock)
    router = APIRouter(route_class=AnthropicErrorRoute, tags=["edges"])
    add = router.add_api_route
    tokens = "/v1/enrollment_tokens"
    add(
        "/v1/environments/{environment_id}/enrollment_tokens",
        routes.create_enrollment_token,
        methods=["POST"],
        response_model=EnrollmentTokenObject,
        responses=_ERRORS,
    )
    add(tokens, routes.list_enrollment_tokens, methods=["GET"], response_model=EnrollmentTokenList)
    add(
        tokens + "/{token_id}/revoke",
        routes.revoke_enrollment_token,
        methods=["POST"],
        response_model=EnrollmentTokenInfo,
        responses=_TOKEN_REVOKE_ERRORS,
    )
    add("/v1/edges", routes.list_edges, methods=["GET"], response_model=EdgeList, responses=_ERRORS)
    add("/v1/edges/{edge_id}", routes.get_edge, methods=["GET"], response_model=EdgeObject, responses=_ERRORS)
    add(
        "/v1/edges/{edge_id}/revoke",
        routes.revoke_edge,
        methods=["POST"],
        response_model=EdgeObject,
        responses=_ERRORS,
    )
    return router
