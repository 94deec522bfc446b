"""OAuth refresh of ``mcp_oauth`` credentials, once per credential at a time.

``get_token`` returns the credential's access token, refreshing it first when it has expired or
expires within ``refresh_margin_s`` (and the credential has a refresh configuration). A refresh is
single-flight per credential at two levels:

* in this process, an ``asyncio.Lock`` per credential id: 20 concurrent callers make one request;
* across processes, a *claim* written into the credential with optimistic concurrency
  (``expected_version``): ``{"refresh_claim": {"holder", "until"}}``. Only the process whose claim
  write wins calls the token endpoint; the others wait (polling the store, with a deadline) until
  the claim is gone or has expired, then read the refreshed token. This matters with rotating
  refresh tokens, where a second refresh would invalidate the first one's result.

The request is ``grant_type=refresh_token`` with ``client_secret_basic`` (HTTP Basic),
``client_secret_post`` (form fields) or ``none`` (``client_id`` only), plus ``scope`` and
``resource`` (RFC 8707) when configured; redirects are not followed. The token endpoint is checked
by the outbound guard before each request (:mod:`control_plane.outbound`: an address that is
loopback, private, metadata ... is refused as ``connect_error``), and the production client dials
only the checked address. The new access token (and a
rotated refresh token) are sealed again with a fresh data key and written with a version check.
Tokens, client secrets and token-endpoint bodies are never logged, and no body is returned to
the API: an error response is summarized as its status code and content type (``body`` is empty;
``body_truncated`` says whether the endpoint sent one).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from control_plane.errors import NotFound, VersionConflict
from control_plane.outbound import OutboundGuard, OutboundRefused
from control_plane.store.base import Resource, Resources
from control_plane.timestamps import timestamp
from control_plane.vault.cipher import CredentialCipher
from control_plane.vault.errors import RefreshFailed
from control_plane.vault.material import SecretMaterial

__all__ = ["OAuthRefresher", "RefreshResult", "scrub"]

log = logging.getLogger(__name__)

_KIND = "vault_credential"
_CONTENT_TYPE_CHARS = 256
_WRITE_ATTEMPTS = 5
_TOKEN_FIELD_RE = re.compile(r'("(?:access_token|refresh_token|id_token|client_secret)"\s*:\s*")[^"]*(")')


@dataclass(frozen=True, slots=True)
class RefreshResult:
    """Outcome of a forced refresh (``mcp_oauth_validate``): ``status`` is ``succeeded``,
    ``failed``, ``connect_error`` or ``no_refresh_token``."""

    status: str
    http_response: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Tokens:
    access_token: str
    refresh_token: str | None
    expires_at: datetime | None

    def __repr__(self) -> str:
        rotated = self.refresh_token is not None
        return f"_Tokens(expires_at={self.expires_at!r}, rotated_refresh_token={rotated})"


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def scrub(text: str, known_secrets: Iterable[str]) -> str:
    """``text`` with every known secret and every token-looking JSON string value redacted."""
    for value in known_secrets:
        if value:
            text = text.replace(value, "[redacted]")
    return _TOKEN_FIELD_RE.sub(r"\1[redacted]\2", text)


class OAuthRefresher:
    def __init__(
        self,
        store: Resources,
        cipher: CredentialCipher,
        http: httpx.AsyncClient,
        clock: Callable[[], datetime],
        *,
        holder: str | None = None,
        refresh_margin_s: float = 60.0,
        claim_ttl_s: float = 30.0,
        claim_poll_s: float = 0.05,
        request_timeout_s: float = 15.0,
        outbound: OutboundGuard | None = None,
    ) -> None:
        self.store = store
        self.outbound = outbound or OutboundGuard()
        self.cipher = cipher
        self.http = http
        self.clock = clock
        self.holder = holder or "refresher_" + secrets.token_hex(6)
        self.refresh_margin_s = refresh_margin_s
        self.claim_ttl_s = max(claim_ttl_s, request_timeout_s + 5.0)
        self.claim_poll_s = claim_poll_s
        self.request_timeout_s = request_timeout_s
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        #: Told ``(vault_id, credential_id)`` when a refresh this process attempted for a token
        #: due failed (the ``vault_credential.refresh_failed`` webhook); set by the composition.
        self.on_refresh_failed: Callable[[str, str], Awaitable[None]] | None = None

    # -- public -----------------------------------------------------------------------------------

    async def get_token(self, credential: Resource | str) -> SecretMaterial:
        """The access token of an ``mcp_oauth`` credential (a stored resource or its id),
        refreshed first if due. If a due refresh fails while the stored token is still valid, or
        the credential cannot refresh, the stored token is returned (the upstream decides); a
        failure with the token expired is raised (``RefreshFailed``)."""
        if isinstance(credential, str):
            credential = await self.store.get_resource(_KIND, credential)
        if not self._due(credential):
            return self._material(credential, await self.cipher.open(credential))
        lock = self._locks.setdefault(credential.id, asyncio.Lock())
        async with lock:
            try:
                res, payload = await self._refresh(credential.id, force=False)
            except RefreshFailed as exc:
                res, payload = await self._read(credential.id)
                if exc.outcome != "no_refresh_token":
                    await self._tell_refresh_failed(res)
                    if self._expired(res):
                        raise
        return self._material(res, payload)

    async def _tell_refresh_failed(self, res: Resource) -> None:
        if self.on_refresh_failed is None:
            return
        try:
            await self.on_refresh_failed(str(res.body["vault_id"]), res.id)
        except Exception:
            log.exception("credential %s: refresh failure not reported", res.id)

    async def refresh(self, credential_id: str) -> RefreshResult:
        """Refresh now, whatever the expiry (credential validation)."""
        lock = self._locks.setdefault(credential_id, asyncio.Lock())
        async with lock:
            try:
                await self._refresh(credential_id, force=True)
            except RefreshFailed as exc:
                return RefreshResult(exc.outcome, dict(exc.http_response) if exc.http_response else None)
        return RefreshResult("succeeded")

    # -- when --------------------------------------------------------------------------------------

    def _expires_at(self, res: Resource) -> datetime | None:
        value = res.body["auth"].get("expires_at")
        return _parse_time(value) if value else None

    def _due(self, res: Resource) -> bool:
        expires = self._expires_at(res)
        return expires is not None and expires - timedelta(seconds=self.refresh_margin_s) <= self.clock()

    def _expired(self, res: Resource) -> bool:
        expires = self._expires_at(res)
        return expires is not None and expires <= self.clock()

    @staticmethod
    def _no_refresh(res: Resource) -> bool:
        return not res.body["auth"].get("refresh") or not res.body.get("has_refresh_token")

    @staticmethod
    def _material(res: Resource, payload: dict[str, str]) -> SecretMaterial:
        return SecretMaterial(
            payload["access_token"],
            vault_id=res.body["vault_id"],
            credential_id=res.id,
            auth_type="mcp_oauth",
        )

    # -- the single flight ---------------------------------------------------------------------------

    async def _refresh(self, credential_id: str, *, force: bool) -> tuple[Resource, dict[str, str]]:
        claimed, payload = await self._claim(credential_id, force=force)
        if claimed is None:  # someone else refreshed meanwhile
            return await self._read(credential_id)
        try:
            tokens = await self._exchange(claimed.body["auth"]["refresh"], payload)
        except BaseException:
            await asyncio.shield(self._release_claim(credential_id))
            raise
        return await self._store_tokens(credential_id, claimed, tokens)

    async def _read(self, credential_id: str) -> tuple[Resource, dict[str, str]]:
        res = await self.store.get_resource(_KIND, credential_id)
        return res, await self.cipher.open(res)

    async def _claim(self, credential_id: str, *, force: bool) -> tuple[Resource | None, dict[str, str]]:
        """Write our claim. ``(None, payload)`` if the refresh is no longer needed (another holder
        did it while we waited); ``RefreshFailed`` if there is nothing to refresh with."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.claim_ttl_s * 2
        waited = False
        while True:
            res, payload = await self._read(credential_id)
            if (waited or not force) and not self._due(res):
                return None, payload  # not due, or refreshed by another holder while we waited
            if self._no_refresh(res) or "refresh_token" not in payload:
                raise RefreshFailed("no_refresh_token", f"credential {credential_id!r} has no refresh token")
            claim = res.body.get("refresh_claim")
            now = self.clock()
            if claim and claim.get("holder") != self.holder and _parse_time(claim["until"]) > now:
                if loop.time() > deadline:
                    raise RefreshFailed("failed", f"credential {credential_id!r}: another refresh is stuck")
                waited = True
                await asyncio.sleep(self.claim_poll_s)
                continue
            until = (now + timedelta(seconds=self.claim_ttl_s)).isoformat()
            body = {**res.body, "refresh_claim": {"holder": self.holder, "until": until}}
            try:
                claimed = await self.store.update_resource(
                    _KIND, credential_id, body, res.updated_at, expected_version=res.version
                )
            except VersionConflict:
                continue
            return claimed, payload

    async def _release_claim(self, credential_id: str) -> None:
        for _ in range(_WRITE_ATTEMPTS):
            try:
                res = await self.store.get_resource(_KIND, credential_id)
                claim = res.body.get("refresh_claim")
                if not claim or claim.get("holder") != self.holder:
                    return
                body = {k: v for k, v in res.body.items() if k != "refresh_claim"}
                await self.store.update_resource(
                    _KIND, credential_id, body, res.updated_at, expected_version=res.version
                )
                return
            except VersionConflict:
                continue
            except Exception:
                log.warning("credential %s: refresh claim not released", credential_id, exc_info=True)
                return

    async def _store_tokens(
        self, credential_id: str, res: Resource, tokens: _Tokens
    ) -> tuple[Resource, dict[str, str]]:
        for _ in range(_WRITE_ATTEMPTS):
            payload = await self.cipher.open(res)
            payload["access_token"] = tokens.access_token
            if tokens.refresh_token is not None:
                payload["refresh_token"] = tokens.refresh_token
            auth = {**res.body["auth"], "expires_at": _iso(tokens.expires_at)}
            body = {k: v for k, v in res.body.items() if k != "refresh_claim"}
            body["auth"] = auth
            body["sealed"] = await self.cipher.seal(body["vault_id"], res.id, auth, payload)
            try:
                stored = await self.store.update_resource(
                    _KIND, credential_id, body, self.clock(), expected_version=res.version
                )
            except VersionConflict:  # an update landed meanwhile: put the new token on top of it
                try:
                    res = await self.store.get_resource(_KIND, credential_id)
                except NotFound:
                    raise RefreshFailed("failed", f"credential {credential_id!r} was deleted") from None
                continue
            log.info("credential %s: access token refreshed", credential_id)
            return stored, payload
        raise RefreshFailed("failed", f"credential {credential_id!r} kept changing during the refresh")

    # -- the token request ---------------------------------------------------------------------------

    async def _exchange(self, refresh: dict[str, Any], payload: dict[str, str]) -> _Tokens:
        data = {"grant_type": "refresh_token", "refresh_token": payload["refresh_token"]}
        if refresh.get("scope"):
            data["scope"] = refresh["scope"]
        if refresh.get("resource"):
            data["resource"] = refresh["resource"]
        headers = {"Accept": "application/json"}
        method = refresh["token_endpoint_auth"]["type"]
        client_id = refresh["client_id"]
        if method == "client_secret_basic":
            pair = f"{quote(client_id, safe='')}:{quote(payload.get('client_secret', ''), safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        else:
            data["client_id"] = client_id
            if method == "client_secret_post":
                data["client_secret"] = payload.get("client_secret", "")
        requested_at = self.clock()
        try:
            await self.outbound.check_dial(refresh["token_endpoint"])
        except OutboundRefused as exc:
            log.warning("token endpoint refused by the outbound rules (%s)", exc.rule)
            raise RefreshFailed(
                "connect_error", f"the token endpoint is not dialled: {exc.message}"
            ) from None
        try:
            response = await self.http.post(
                refresh["token_endpoint"],
                data=data,
                headers=headers,
                follow_redirects=False,
                timeout=self.request_timeout_s,
            )
        except OutboundRefused as exc:  # the name now resolves elsewhere (checked at the dial)
            log.warning("token endpoint refused by the outbound rules (%s)", exc.rule)
            raise RefreshFailed(
                "connect_error", f"the token endpoint is not dialled: {exc.message}"
            ) from None
        except httpx.HTTPError as exc:
            log.warning("token endpoint %s unreachable: %s", refresh["token_endpoint"], type(exc).__name__)
            raise RefreshFailed("connect_error", "the token endpoint could not be reached") from None
        if response.status_code != 200:
            log.warning("token endpoint %s answered %d", refresh["token_endpoint"], response.status_code)
            raise RefreshFailed(
                "failed",
                f"the token endpoint answered {response.status_code}",
                response.status_code,
                _capture(response),
            )
        try:
            body = response.json()
            access_token = body["access_token"]
            if not isinstance(access_token, str) or not access_token:
                raise TypeError
            rotated = body.get("refresh_token")
            if rotated is not None and (not isinstance(rotated, str) or not rotated):
                raise TypeError
            expires_in = body.get("expires_in")
            expires_at = None
            if expires_in is not None:
                expires_at = requested_at + timedelta(seconds=float(expires_in))
        except (ValueError, TypeError, KeyError, AttributeError):
            message = "the token endpoint's answer has no usable access_token"
            raise RefreshFailed("failed", message, 200, _capture(response)) from None
        return _Tokens(access_token, rotated, expires_at)


def _iso(value: datetime | None) -> str | None:
    return timestamp(value) if value is not None else None


def _capture(response: httpx.Response) -> dict[str, Any]:
    """A summary of the token endpoint's answer for the API: never its body (the endpoint is
    named by a caller, and its answer may hold what the caller must not read)."""
    return {
        "status_code": response.status_code,
        "content_type": response.headers.get("content-type", "")[:_CONTENT_TYPE_CHARS],
        "body": "",
        "body_truncated": bool(response.content),
    }
