"""Webhook endpoints (an Outpost extension: the hosted product manages them in its Console).

An endpoint is a ``webhook_endpoint`` resource: the URL deliveries are POSTed to, the event types
it wants (none: all), the environment it is limited to (none: events of every environment and
those of no environment), a description, and whether it is enabled. Its signing secret
(``whsec_<base64>``, the Standard Webhooks form ``client.beta.webhooks.unwrap(key=...)`` takes) is
made at create and on :meth:`EndpointService.rotate_secret`, shown in that answer only, and kept
sealed with the vault's keyring (associated data: the endpoint's id, so a sealed secret copied to
another endpoint does not open).

URL rules, checked when stored (and the address again when dialled, by the deliverer):
``https://`` only, or ``http://`` to a loopback host when ``webhooks.allow_http_loopback``; no
user info; at most 2048 characters; the host must pass the outbound rules
(:class:`~control_plane.outbound.OutboundGuard`: no private, loopback, link-local ... address
unless ``outbound_allow_networks`` allows it).

Who may do what is the viewer's business: a :class:`Viewer` limited to environments sees (and
may name) only endpoints scoped to one of them; another endpoint is ``NotFound`` like an unknown
id. The HTTP layer lets only unscoped ``read_write`` and ``admin`` keys change endpoints.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from control_plane.errors import Conflict, InvalidRequest, NotFound
from control_plane.outbound import OutboundGuard
from control_plane.patch import Keep
from control_plane.store.base import Order, Page, Resource, Resources
from control_plane.vault.crypto import SealedSecret, seal, unseal
from control_plane.vault.keys import Keyring
from control_plane.webhooks.commands import CreateEndpoint, EndpointView, UpdateEndpoint, Viewer
from control_plane.webhooks.config import WebhookConfig
from control_plane.webhooks.envelope import EVENT_TYPES

__all__ = ["ENDPOINT_KIND", "MAX_PAGE", "EndpointSecrets", "EndpointService", "list_enabled_endpoints"]

ENDPOINT_KIND = "webhook_endpoint"
MAX_PAGE = 100
_MAX_URL_CHARS = 2048
_MAX_DESCRIPTION_CHARS = 512
_SECRET_BYTES = 24
_AAD_VERSION = 1


class EndpointSecrets:
    """Makes, seals and opens endpoints' signing secrets with the vault's keyring."""

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    @staticmethod
    def new_secret() -> str:
        return "whsec_" + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()

    @staticmethod
    def _aad(endpoint_id: str) -> bytes:
        return json.dumps(["outpost-webhook-endpoint", _AAD_VERSION, endpoint_id]).encode()

    async def seal(self, endpoint_id: str, secret: str) -> dict[str, str]:
        return (await seal(secret.encode(), self._aad(endpoint_id), self._keyring.current)).to_json()

    async def open(self, endpoint: Resource) -> str:
        """The endpoint's secret (``DecryptionFailed`` / ``UnknownKey`` if it does not open)."""
        sealed = SealedSecret.from_json(endpoint.body["sealed_secret"])
        return (await unseal(sealed, self._aad(endpoint.id), self._keyring)).decode()


async def list_enabled_endpoints(store: Resources, limit: int) -> list[Resource]:
    """Every enabled endpoint (at most ``limit``), oldest first."""
    found: list[Resource] = []
    cursor: str | None = None
    while len(found) < limit:
        page = await store.list_resources(
            ENDPOINT_KIND, filters={"enabled": True}, limit=MAX_PAGE, cursor=cursor, order=Order.ASC
        )
        found.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    return found[:limit]


def _is_loopback_host(host: str) -> bool:
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class EndpointService:
    def __init__(
        self,
        store: Resources,
        secrets_: EndpointSecrets,
        clock: Callable[[], datetime],
        *,
        outbound: OutboundGuard | None = None,
        config: WebhookConfig | None = None,
        changed: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._secrets = secrets_
        self._clock = clock
        self._outbound = outbound or OutboundGuard()
        self._config = config or WebhookConfig()
        self._changed = changed  # told after an endpoint was made, changed or deleted (the outbox's cache)

    # -- reads -----------------------------------------------------------------------------
    async def get(self, endpoint_id: str, viewer: Viewer) -> Resource:
        res = await self._store.get_resource(ENDPOINT_KIND, endpoint_id)
        if not viewer.sees(res.body.get("environment_id")):
            raise NotFound(ENDPOINT_KIND, endpoint_id)
        return res

    async def list_endpoints(self, viewer: Viewer, *, limit: int, cursor: str | None) -> Page:
        """A page, newest first. A viewer limited to one environment gets that environment's
        endpoints; one limited to several reads them through the store's filter one at a time."""
        scope = viewer.environment_ids
        if scope is None:
            return await self._store.list_resources(ENDPOINT_KIND, limit=limit, cursor=cursor)
        if len(scope) == 1:
            (only,) = scope
            return await self._store.list_resources(
                ENDPOINT_KIND, filters={"environment_id": only}, limit=limit, cursor=cursor
            )
        # several environments: filter a full read (endpoints are few: webhooks.max_endpoints)
        everything = await self._all()
        return Page([r for r in everything if viewer.sees(r.body.get("environment_id"))][:limit], None)

    # -- changes ---------------------------------------------------------------------------
    async def create(self, command: CreateEndpoint, viewer: Viewer) -> EndpointView:
        body: dict[str, Any] = {
            "url": self._check_url(command.url),
            "event_types": _check_types(command.event_types),
            "environment_id": await self._check_environment(command.environment_id, viewer),
            "description": _check_description(command.description),
            "enabled": True,
        }
        if len(await self._all()) >= self._config.max_endpoints:
            raise InvalidRequest(
                f"this control plane holds at most {self._config.max_endpoints} webhook endpoints "
                "(webhooks.max_endpoints); delete one first"
            )
        endpoint_id = "whep_" + secrets.token_hex(12)
        secret = self._secrets.new_secret()
        body["sealed_secret"] = await self._secrets.seal(endpoint_id, secret)
        res = await self._store.create_resource(ENDPOINT_KIND, endpoint_id, body, self._clock())
        self._tell_changed()
        return EndpointView(res, secret)

    async def update(self, endpoint_id: str, command: UpdateEndpoint, viewer: Viewer) -> Resource:
        current = await self.get(endpoint_id, viewer)
        body = dict(current.body)
        if not isinstance(command.url, Keep):
            body["url"] = self._check_url(command.url)
        if not isinstance(command.event_types, Keep):
            body["event_types"] = _check_types(command.event_types)
        if not isinstance(command.description, Keep):
            body["description"] = _check_description(command.description)
        if not isinstance(command.enabled, Keep):
            body["enabled"] = command.enabled
        if body == current.body:
            return current
        return await self._write(current, body)

    async def rotate_secret(self, endpoint_id: str, viewer: Viewer) -> EndpointView:
        """A new secret, shown once; deliveries signed from now on use it (the old one is gone)."""
        current = await self.get(endpoint_id, viewer)
        secret = self._secrets.new_secret()
        body = {**current.body, "sealed_secret": await self._secrets.seal(endpoint_id, secret)}
        return EndpointView(await self._write(current, body), secret)

    async def delete(self, endpoint_id: str, viewer: Viewer) -> None:
        """Deliveries still pending for it end ``failed`` ("endpoint deleted") when next due."""
        await self.get(endpoint_id, viewer)
        await self._store.delete_resource(ENDPOINT_KIND, endpoint_id)
        self._tell_changed()

    def _tell_changed(self) -> None:
        if self._changed is not None:
            self._changed()

    # -- rules -----------------------------------------------------------------------------
    async def _write(self, current: Resource, body: dict[str, Any]) -> Resource:
        try:
            written = await self._store.update_resource(
                ENDPOINT_KIND, current.id, body, self._clock(), expected_version=current.version
            )
            self._tell_changed()
            return written
        except Conflict:
            raise Conflict(f"webhook endpoint {current.id!r} changed meanwhile; retry") from None

    async def _all(self) -> list[Resource]:
        found: list[Resource] = []
        cursor: str | None = None
        while True:
            page = await self._store.list_resources(ENDPOINT_KIND, limit=MAX_PAGE, cursor=cursor)
            found.extend(page.items)
            cursor = page.next_cursor
            if cursor is None or len(found) > self._config.max_endpoints:
                return found

    async def _check_environment(self, environment_id: str | None, viewer: Viewer) -> str | None:
        if environment_id is None:
            return None
        if not viewer.sees(environment_id):
            raise NotFound("environment", environment_id)
        await self._store.get_resource("environment", environment_id)  # NotFound if unknown
        return environment_id

    def _check_url(self, url: str) -> str:
        url = url.strip()
        if len(url) > _MAX_URL_CHARS:
            raise InvalidRequest(f"url: at most {_MAX_URL_CHARS} characters", param="url")
        try:
            parts = urlsplit(url)
            host, _ = parts.hostname or "", parts.port
        except ValueError:
            raise InvalidRequest("url: not a valid URL", param="url") from None
        if not host:
            raise InvalidRequest("url: needs a host", param="url")
        if parts.username is not None or parts.password is not None:
            raise InvalidRequest("url: must not hold user info (user:password@)", param="url")
        scheme = parts.scheme.lower()
        if scheme == "http":
            if not (self._config.allow_http_loopback and _is_loopback_host(host)):
                raise InvalidRequest(
                    "url: must be https:// (http:// only to a loopback host, and only when "
                    "webhooks.allow_http_loopback is set)",
                    param="url",
                )
        elif scheme != "https":
            raise InvalidRequest("url: must be an https:// URL", param="url")
        self._outbound.check_url(url, param="url")
        return url


def _check_types(event_types: Sequence[str]) -> list[str]:
    unknown = sorted({t for t in event_types if t not in EVENT_TYPES})
    if unknown:
        raise InvalidRequest(
            f"event_types: unknown webhook event type(s) {', '.join(unknown)[:300]}", param="event_types"
        )
    return sorted(set(event_types))


def _check_description(description: str) -> str:
    if len(description) > _MAX_DESCRIPTION_CHARS:
        raise InvalidRequest(f"description: at most {_MAX_DESCRIPTION_CHARS} characters", param="description")
    return description
