"""Automatic renewal of the edge's client certificate, as kubelet rotates its own.

::

    identity has less than renew_before_days left (or a third of its lifetime, if that is shorter)
      └─► new key + CSR; the key goes to identity/edge.key.pending (0600) first
            └─► POST {control_plane_url}/v1/edges/renew {csr_pem}
                  Authorization: Outpost-PoP <token signed with the CURRENT key>
                  └─► check the answer (same edge, same CA, the certificate is for the new key)
                        └─► edge.key + edge.crt replaced (Identity.commit_renewal); the daemon
                            presents the new identity from its next connection on

The control plane keeps accepting the certificate the edge renewed from until the edge first uses
the new one, so a crash anywhere in between costs nothing: the old identity still connects, and
the next check renews again (a pending key left behind is discarded first).

Over ``https://`` the request goes with the same TLS as the WebSocket tunnel (the control plane's
CA plus the system's trust store; the edge's client certificate when asked) and through the same
proxy (``connection.proxy_url``, else ``https_proxy`` minus ``no_proxy``). The token and the key
are never logged.

:class:`RenewalSchedule` decides when (pure, clock passed in); :class:`CertificateRenewer` is the
daemon's task; :func:`renew_certificate` does one renewal (also ``outpost-edge renew-certificate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from edge_agent.connection.proxy import resolve_proxy
from edge_agent.connection.ws_transport import tls_client_context
from edge_agent.errors import ConfigError, EdgeError
from edge_agent.identity import (
    Identity,
    IdentityError,
    discard_pending_key,
    generate_key_and_csr,
    write_pending_key,
)
from outpost_wire.pop import AUTH_SCHEME, create_token

__all__ = [
    "RENEW_AUDIENCE_PREFIX",
    "RENEW_PATH",
    "CertificateRenewer",
    "RenewalError",
    "RenewalSchedule",
    "renew_certificate",
    "renewal_urls",
    "spread_for",
]

log = logging.getLogger(__name__)

RENEW_PATH = "/v1/edges/renew"
#: Kept in step by hand with control_plane.enroll.service.RENEW_AUDIENCE_PREFIX: renewal tokens
#: have their own audience, so a tunnel token cannot be used to renew (and the other way round).
RENEW_AUDIENCE_PREFIX = "outpost-renew:"
DEFAULT_TIMEOUT_S = 30.0
_LOCK_FILE = ".renew.lock"


class RenewalError(EdgeError):
    """A renewal failed; the working identity is unchanged. ``status_code`` is set when the
    control plane answered with an error (401: it no longer accepts this edge's certificate)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def _utcnow() -> datetime:
    return datetime.now(UTC)


# -- when ---------------------------------------------------------------------------------------------
def spread_for(edge_id: str) -> float:
    """A stable number in [0, 1) for the edge: where in the renewal window it renews."""
    return int.from_bytes(hashlib.sha256(edge_id.encode()).digest()[:8], "big") / 2**64


class RenewalSchedule:
    """When to renew, and how long to wait before the next check. Pure: times are passed in.

    * due once less than ``renew_before`` is left of the certificate, or less than a third of its
      lifetime if that is shorter (a 365-day certificate renews 30 days before it expires, a
      30-day one 10 days before);
    * between checks, at most ``check_interval_s`` (and no later than the moment it becomes due);
    * after a failure, ``retry_initial_s`` doubling up to ``retry_max_s`` (never more than the
      check interval), until a renewal succeeds;
    * ``spread`` (0..1, from the edge id: :func:`spread_for`) moves the moment up to half a window
      earlier, so a fleet enrolled on one day does not renew in the same minute.
    """

    def __init__(
        self,
        *,
        renew_before: timedelta,
        check_interval_s: float,
        retry_initial_s: float = 60.0,
        retry_max_s: float = 900.0,
        spread: float = 0.0,
    ) -> None:
        if not 0.0 <= spread < 1.0:
            raise ValueError("spread must be in [0, 1)")
        self.spread = spread
        self.renew_before = renew_before
        self.check_interval_s = check_interval_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.failures = 0

    def renew_at(self, not_before: datetime, not_after: datetime) -> datetime:
        """From when a certificate valid ``not_before`` .. ``not_after`` is renewed."""
        lifetime = max(not_after - not_before, timedelta(0))
        return not_after - min(self.renew_before, lifetime / 3) * (1 + self.spread / 2)

    def due(self, not_before: datetime, not_after: datetime, now: datetime) -> bool:
        return now >= self.renew_at(not_before, not_after)

    def next_check_s(self, not_before: datetime, not_after: datetime, now: datetime) -> float:
        """Seconds until the next check of a certificate that is not due (or was just renewed)."""
        until_due = (self.renew_at(not_before, not_after) - now).total_seconds()
        return max(1.0, min(self.check_interval_s, until_due))

    def failed(self) -> float:
        """Record a failed renewal; seconds until the retry."""
        self.failures += 1
        delay = self.retry_initial_s * float(2 ** min(self.failures - 1, 32))
        return min(delay, self.retry_max_s, self.check_interval_s)

    def succeeded(self) -> None:
        self.failures = 0


# -- one renewal ----------------------------------------------------------------------------------------
def renewal_urls(configured: Sequence[str | None], identity: Identity) -> list[str]:
    """The control-plane URLs a renewal tries in order: the configured ones (``control_plane.url``
    or each ``addresses[].url``), then the one the edge registered with."""
    urls: list[str] = []
    for url in (*configured, identity.control_plane_url):
        if url and url.rstrip("/") not in urls:
            urls.append(url.rstrip("/"))
    return urls


@contextlib.contextmanager
def _renewal_lock(directory: Path) -> Iterator[None]:
    """One renewal at a time per identity (the daemon and ``renew-certificate`` may overlap)."""
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RenewalError("another renewal of this edge's certificate is in progress") from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


async def renew_certificate(
    identity: Identity,
    urls: Sequence[str],
    *,
    proxy_url: str | None = None,
    env: Mapping[str, str] | None = None,
    http_client: httpx.AsyncClient | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.time,
) -> Identity:
    """Renew ``identity``'s certificate now and store the new key and certificate in its directory;
    returns the new identity. ``urls`` are tried in order until one answers (a control plane that
    answers with an error is not second-guessed by the next one).

    Raises :class:`RenewalError` (the stored identity is then unchanged, or — had the process died
    at the wrong moment — finished by the next :meth:`Identity.load`)."""
    directory = identity.directory
    if directory is None:
        raise RenewalError("this identity is not stored on disk: register the edge first")
    if not urls:
        raise RenewalError("no control-plane URL to renew at: set control_plane.url in the config")
    with _renewal_lock(directory):
        try:
            on_disk = await asyncio.to_thread(Identity.load, directory.parent)
        except IdentityError as exc:
            raise RenewalError(str(exc)) from None
        if on_disk.fingerprint != identity.fingerprint:
            raise RenewalError(
                "the identity on disk changed since it was loaded (renewed by another process?); "
                "reload it and check again"
            )
        if await asyncio.to_thread(discard_pending_key, directory):
            log.info("discarded a pending key left by an interrupted certificate renewal")
        key_pem, csr_pem = generate_key_and_csr()
        await asyncio.to_thread(write_pending_key, directory, key_pem)
        try:
            payload = await _post_renewal(
                identity, urls, csr_pem, proxy_url, env, http_client, timeout_s, clock
            )
            answered = _check_answer(identity, payload, key_pem)
        except BaseException:
            with contextlib.suppress(OSError):
                discard_pending_key(directory)  # two small unlinks; safe while being cancelled
            raise
        # Not undone once started: Identity.load finishes a commit that was cut short.
        try:
            renewed = await asyncio.to_thread(identity.commit_renewal, key_pem, answered.cert_pem)
        except (IdentityError, OSError) as exc:
            raise RenewalError(f"cannot store the renewed certificate: {exc}") from None
    log.info(
        "renewed the client certificate of edge %s: valid until %s (was %s)",
        renewed.edge_id,
        renewed.not_after.isoformat(),
        identity.not_after.isoformat(),
    )
    return renewed


async def _post_renewal(
    identity: Identity,
    urls: Sequence[str],
    csr_pem: bytes,
    proxy_url: str | None,
    env: Mapping[str, str] | None,
    http_client: httpx.AsyncClient | None,
    timeout_s: float,
    clock: Callable[[], float],
) -> dict[str, Any]:
    errors: list[str] = []
    for base in urls:
        url = base.rstrip("/") + RENEW_PATH
        token = create_token(  # fresh for every attempt: the control plane takes each once
            key_pem=identity.key_pem,
            cert_pem=identity.cert_pem,
            edge_id=identity.edge_id,
            audience=RENEW_AUDIENCE_PREFIX + identity.ca_fingerprint,
            now=clock(),
        )
        headers = {"Authorization": f"{AUTH_SCHEME} {token}"}
        body = {"csr_pem": csr_pem.decode("ascii")}
        try:
            if http_client is not None:
                response = await http_client.post(url, json=body, headers=headers)
            else:
                async with _client(identity, url, proxy_url, env, timeout_s) as client:
                    response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            # str(exc) names the failure and maybe the URL, never the headers (the token).
            log.info("certificate renewal: cannot reach %s: %s", url, exc)
            errors.append(f"{url}: {exc}")
            continue
        return _payload(response, url)
    raise RenewalError("cannot reach the control plane: " + "; ".join(errors))


def _client(
    identity: Identity, url: str, proxy_url: str | None, env: Mapping[str, str] | None, timeout_s: float
) -> httpx.AsyncClient:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RenewalError(f"control plane URL {url!r} is not an http(s):// URL")
    try:
        proxy = resolve_proxy(
            parts.hostname,
            parts.port or (443 if parts.scheme == "https" else 80),
            override=proxy_url,
            env=os.environ if env is None else env,
        )
    except ConfigError as exc:
        raise RenewalError(str(exc)) from None
    verify = tls_client_context(identity) if parts.scheme == "https" else True
    return httpx.AsyncClient(
        timeout=timeout_s,
        verify=verify,
        proxy=proxy.url if proxy is not None else None,
        trust_env=False,  # the proxy is resolved above, as for the tunnel
        follow_redirects=False,
    )


def _payload(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code != 200:
        error = payload.get("error") if isinstance(payload, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        detail = message if isinstance(message, str) else f"HTTP {response.status_code}"
        hint = ""
        if response.status_code == 401:
            hint = (
                " (the control plane no longer accepts this edge's certificate: if the edge was "
                "revoked or its certificate expired, register it again with a new enrollment token)"
            )
        elif response.status_code == 404:
            hint = " (this control plane does not renew certificates yet: upgrade it)"
        raise RenewalError(
            f"control plane refused the renewal at {url}: {detail}{hint}", status_code=response.status_code
        )
    if not isinstance(payload, dict):
        raise RenewalError(f"control plane answered the renewal at {url} with something other than JSON")
    return payload


def _check_answer(identity: Identity, payload: dict[str, Any], key_pem: bytes) -> Identity:
    def field(name: str) -> str:
        value = payload.get(name)
        if not isinstance(value, str) or not value:
            raise RenewalError(f"control plane answer lacks {name}")
        return value

    if field("edge_id") != identity.edge_id:
        raise RenewalError("control plane answered with a certificate for another edge")
    try:
        ca = x509.load_pem_x509_certificate(field("ca_certificate_pem").encode("utf-8"))
    except ValueError:
        raise RenewalError("control plane answered with an unreadable CA certificate") from None
    if not hmac.compare_digest(ca.fingerprint(hashes.SHA256()).hex(), identity.ca_fingerprint):
        raise RenewalError(
            "control plane answered with another CA than the one this edge trusts; refusing it "
            "(a new CA means registering the edge again)"
        )
    renewed = Identity(
        edge_id=identity.edge_id,
        environment_id=identity.environment_id,
        key_pem=key_pem,
        cert_pem=field("certificate_pem").encode("utf-8"),
        ca_pem=identity.ca_pem,
        control_plane_url=identity.control_plane_url,
        tunnel_address=identity.tunnel_address,
    )
    try:
        renewed.verify()
    except IdentityError as exc:
        raise RenewalError(f"control plane answered with an unusable certificate: {exc}") from None
    return renewed


# -- the daemon's task ----------------------------------------------------------------------------------
class Renew(Protocol):
    def __call__(self, identity: Identity, urls: Sequence[str]) -> Awaitable[Identity]: ...


class CertificateRenewer:
    """Checks at start and then on :class:`RenewalSchedule`'s cadence; renews when due; hands a
    new identity to ``on_renewed`` (the daemon points its dialer at it). Failures are logged and
    retried with backoff; the working identity is never given up.

    Each check first reads the identity on disk: one renewed by ``outpost-edge renew-certificate``
    is adopted instead of renewing again."""

    def __init__(
        self,
        identity: Identity,
        *,
        schedule: RenewalSchedule,
        urls: Sequence[str],
        renew: Renew,
        on_renewed: Callable[[Identity], None],
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        load: Callable[[Path], Identity] = Identity.load,
        on_attempt: Callable[[bool], None] | None = None,
    ) -> None:
        self.identity = identity
        self.schedule = schedule
        self._urls = list(urls)
        self._renew = renew
        self._on_renewed = on_renewed
        self._clock = clock
        self._sleep = sleep
        self._load = load
        self._on_attempt = on_attempt
        #: seconds until the next check, as the last :meth:`check` decided
        self.next_check_s: float | None = None

    async def run(self) -> None:
        while True:
            self.next_check_s = await self.check()
            await self._sleep(self.next_check_s)

    async def check(self) -> float:
        """One check (renewing if due); returns seconds until the next one."""
        await self._adopt_from_disk()
        current = self.identity
        now = self._clock()
        if not self.schedule.due(current.not_before, current.not_after, now):
            self.schedule.succeeded()
            return self.schedule.next_check_s(current.not_before, current.not_after, now)
        try:
            renewed = await self._renew(current, self._urls)
        except (RenewalError, IdentityError, OSError) as exc:
            delay = self.schedule.failed()
            self._attempted(False)
            log.warning(
                "certificate renewal failed (attempt %d): %s; retrying in %.0f s. The current "
                "certificate stays in use; it expires %s",
                self.schedule.failures,
                exc,
                delay,
                current.not_after.isoformat(),
            )
            return delay
        self.schedule.succeeded()
        self._attempted(True)
        self._use(renewed)
        return self.schedule.next_check_s(renewed.not_before, renewed.not_after, self._clock())

    async def _adopt_from_disk(self) -> None:
        directory = self.identity.directory
        if directory is None:
            return
        try:
            on_disk = await asyncio.to_thread(self._load, directory.parent)
        except IdentityError as exc:
            log.warning("cannot read the stored identity (%s); keeping the one in use", exc)
            return
        if (
            on_disk.edge_id == self.identity.edge_id
            and on_disk.fingerprint != self.identity.fingerprint
            and on_disk.not_after > self.identity.not_after
        ):
            log.info(
                "the stored certificate was renewed by another process (valid until %s): using it",
                on_disk.not_after.isoformat(),
            )
            self._use(on_disk)

    def _use(self, identity: Identity) -> None:
        self.identity = identity
        self._on_renewed(identity)

    def _attempted(self, ok: bool) -> None:
        if self._on_attempt is not None:
            self._on_attempt(ok)
