"""Register this edge with the control plane: exchange an enrollment token for a client certificate.

::

    generate key + CSR (the key never leaves this machine)
      └─► POST {control_plane_url}/v1/edges/enroll {token, csr_pem, name}
            └─► check the CA against the pinned fingerprint (if given),
                check the certificate is for our key and issued by that CA,
                save the identity under state_dir/identity

The pin works like kubeadm's discovery hash: with ``ca_fingerprint`` (sha256 of the CA
certificate's DER, as ``create_token`` reports it) an enrollment over plain HTTP or through an
intercepting proxy cannot hand the edge a foreign CA. Without a pin the CA is trusted on first use.

With a pin, the CA is read and checked *before* the token is sent, so a wrong pin does not spend
the token. Over ``https://`` the token then only goes over a connection verified against it::

    GET {control_plane_url}/v1/edges/enroll/ca   over TLS *without* verification, only to read the CA
      └─► its sha256 must be the pin (else: refused, nothing sent)
            └─► POST the token over TLS verified against that CA alone (a control plane with
                ``http_tls`` serves a certificate from its own CA)

If the server's certificate is not from the pinned CA (TLS terminated by a reverse proxy with a
certificate from a public CA) or the control plane does not serve its CA, the POST is verified
against the system's trust store instead, as without a pin; the CA in the answer is still checked
against the pin. A certificate that neither verifies is refused before the token is sent.

The token is a credential: it is sent once, never logged and never written to disk.

Errors::

    EnrollmentError              registration failed (the message says why)
    ├── EnrollmentRefused        the control plane refused the token (unknown, expired, used), or
    │                            its CA is not the pinned one: retrying will not help
    └── EnrollmentUnreachable    the control plane could not be reached

:func:`render_config` and :func:`write_config` make the edge's ``config.yaml`` from the identity
(``outpost-edge register --write-config PATH``): commented, with the control plane's URL, tunnel
address and the state directory filled in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import os
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from edge_agent.errors import EdgeError
from edge_agent.identity import Identity, IdentityError, generate_key_and_csr
from outpost_wire.files import write_atomic

__all__ = [
    "EnrollmentError",
    "EnrollmentRefused",
    "EnrollmentUnreachable",
    "check_config_target",
    "config_is_empty",
    "normalize_fingerprint",
    "normalize_url",
    "register",
    "render_config",
    "write_config",
]

log = logging.getLogger(__name__)

ENROLL_PATH = "/v1/edges/enroll"
CA_PATH = "/v1/edges/enroll/ca"  # the CA certificate, public
DEFAULT_TIMEOUT_S = 30.0
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class EnrollmentError(EdgeError):
    """Registration failed; the message is the control plane's when it gave one.

    ``status_code`` and ``error_type`` are set when the control plane answered with an error.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, error_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


class EnrollmentRefused(EnrollmentError):
    """The control plane refused the enrollment (token unknown, expired or used), or its CA is not
    the pinned one: retrying with the same input will not help."""


class EnrollmentUnreachable(EnrollmentError):
    """The control plane could not be reached (DNS, connection, TLS, timeout)."""


def normalize_url(value: str) -> str:
    """The control plane's API base URL, checked: ``http(s)://host[:port][/path]``, no trailing
    slash. Raises :class:`EnrollmentError` naming what is wrong."""
    text = value.strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise EnrollmentError(f"control plane URL {value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise EnrollmentError(
            f"control plane URL {value!r} must start with https:// or http://, e.g. https://outpost.example.com:8080"
        )
    if not parts.hostname:
        raise EnrollmentError(f"control plane URL {value!r} names no host")
    if parts.query or parts.fragment or parts.username is not None:
        raise EnrollmentError(
            f"control plane URL {value!r} must not carry credentials, a query or a fragment"
        )
    return text.rstrip("/")


def normalize_fingerprint(value: str) -> str:
    """Lower-case hex of a sha256 fingerprint given as ``ab12…``, ``AB:12:…`` or ``sha256:ab12…``.

    Raises :class:`EnrollmentError` if it is not 32 bytes of hex.
    """
    text = value.strip().lower().removeprefix("sha256:").replace(":", "")
    if not _HEX64.fullmatch(text):
        raise EnrollmentError("ca_fingerprint must be a sha256 hex digest (64 hex digits)")
    return text


async def register(
    control_plane_url: str,
    token: str,
    state_dir: Path,
    *,
    name: str,
    ca_fingerprint: str | None = None,
    tunnel_address: str | None = None,
    http_client: httpx.AsyncClient | None = None,
    overwrite: bool = False,
) -> Identity:
    """Enroll this edge and save its identity under ``state_dir``; returns the identity.

    ``tunnel_address`` is used unless the control plane's answer names one. An identity already in
    ``state_dir`` is kept (and the token left unspent) unless ``overwrite`` is true. Raises
    :class:`EnrollmentError`, with the control plane's message for a refused request (for example
    ``enrollment token rejected: expired``).
    """
    pin = normalize_fingerprint(ca_fingerprint) if ca_fingerprint is not None else None
    if not overwrite and await asyncio.to_thread(Identity.exists, state_dir):
        raise EnrollmentError(
            f"{state_dir} already holds an edge identity; remove it or pass overwrite to replace it"
        )
    base_url = normalize_url(control_plane_url)
    if pin is None and base_url.startswith("http://"):
        log.warning("enrolling over plain HTTP without a CA fingerprint pin: the CA is trusted on first use")

    verify: ssl.SSLContext | None = None
    if pin is not None and http_client is None:
        # Check the pin before the token goes anywhere: a wrong pin must not spend the token.
        ca_pem = await _pinned_ca(base_url, pin)
        if ca_pem is not None and base_url.startswith("https://"):
            # cadata given: the default context trusts that CA and nothing else (no system store).
            verify = ssl.create_default_context(cadata=ca_pem.decode("ascii"))

    key_pem, csr_pem = generate_key_and_csr()
    body = {"token": token, "csr_pem": csr_pem.decode("ascii"), "name": name}
    payload = await _post(base_url + ENROLL_PATH, body, http_client, verify=verify)

    edge_id = _field(payload, "edge_id")
    environment_id = _field(payload, "environment_id")
    cert_pem = _field(payload, "certificate_pem").encode("utf-8")
    ca_pem = _field(payload, "ca_certificate_pem").encode("utf-8")
    answered_tunnel = payload.get("tunnel_address")
    if answered_tunnel is not None and not isinstance(answered_tunnel, str):
        raise EnrollmentError("control plane answered with a non-string tunnel_address")

    try:
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
    except ValueError:
        raise EnrollmentError("control plane answered with an unreadable CA certificate") from None
    got = ca_cert.fingerprint(hashes.SHA256()).hex()
    if pin is not None and not hmac.compare_digest(got, pin):
        raise EnrollmentRefused(
            f"CA fingerprint mismatch: pinned sha256 {pin}, control plane sent {got}; "
            "refusing to trust it (wrong control plane, or someone in between)"
        )

    identity = Identity(
        edge_id=edge_id,
        environment_id=environment_id,
        key_pem=key_pem,
        cert_pem=cert_pem,
        ca_pem=ca_pem,
        control_plane_url=base_url,
        tunnel_address=answered_tunnel or tunnel_address,
    )
    try:
        identity.verify()
    except IdentityError as exc:
        raise EnrollmentError(f"control plane answered with an unusable certificate: {exc}") from None
    directory = await asyncio.to_thread(identity.save, state_dir)
    identity = dataclasses.replace(identity, directory=directory)
    log.info(
        "registered edge %s in environment %s (CA sha256 %s); identity saved in %s",
        edge_id,
        environment_id,
        got,
        directory,
    )
    return identity


async def _pinned_ca(base_url: str, pin: str) -> bytes | None:
    """The control plane's CA certificate (PEM), after checking it against ``pin`` (raises
    :class:`EnrollmentError` on a mismatch; nothing secret has been sent by then). ``None`` when
    the control plane does not serve its CA (an older one): the pin is then checked against the
    CA in the enrollment answer, as before.

    Over ``https://`` the CA is read without verifying the server: it is public, and only the pin
    makes it trusted.
    """
    url = base_url + CA_PATH
    try:
        async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT_S, verify=False) as client:  # noqa: S501
            response = await client.get(url)
    except httpx.HTTPError as exc:
        raise EnrollmentUnreachable(f"cannot reach the control plane at {url}: {_why(exc)}") from None
    if response.status_code == 404:
        log.info("the control plane does not serve its CA at %s; the pin is checked on its answer", url)
        return None
    try:
        ca_pem = str(response.json()["ca_certificate_pem"]).encode("utf-8")
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
    except (ValueError, KeyError, TypeError):
        raise EnrollmentError(f"control plane answered {url} without a readable CA certificate") from None
    got = ca_cert.fingerprint(hashes.SHA256()).hex()
    if not hmac.compare_digest(got, pin):
        raise EnrollmentRefused(
            f"CA fingerprint mismatch: pinned sha256 {pin}, control plane serves {got}; "
            "refusing to send the enrollment token (wrong control plane, or someone in between)"
        )
    return ca_pem


def _is_cert_verify_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _post(
    url: str,
    body: dict[str, str],
    http_client: httpx.AsyncClient | None,
    *,
    verify: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """POST ``body`` as JSON, returning the decoded object or raising :class:`EnrollmentError`.

    With ``verify`` (trusting only the pinned CA), a server certificate it does not verify makes
    the POST go again verified by the system's trust store (a reverse proxy's certificate); the
    failed attempt sent nothing, since TLS fails before the request."""
    try:
        if http_client is not None:
            response = await http_client.post(url, json=body)
        elif verify is not None:
            try:
                async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT_S, verify=verify) as client:
                    response = await client.post(url, json=body)
            except httpx.ConnectError as exc:
                if not _is_cert_verify_error(exc):
                    raise
                log.warning(
                    "the control plane's HTTPS certificate is not from its pinned CA (a reverse proxy?): "
                    "verifying it with the system's trust store instead"
                )
                async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT_S) as client:
                    response = await client.post(url, json=body)
        else:
            async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT_S) as client:
                response = await client.post(url, json=body)
    except httpx.HTTPError as exc:
        # str(exc) names the failure and maybe the URL, never the request body (the token).
        raise EnrollmentUnreachable(f"cannot reach the control plane at {url}: {_why(exc)}") from None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code != 200:
        error = payload.get("error") if isinstance(payload, dict) else None
        refused = response.status_code in (401, 403)
        kind = EnrollmentRefused if refused else EnrollmentError
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise kind(
                error["message"],
                status_code=response.status_code,
                error_type=str(error.get("type", "")) or None,
            )
        raise kind(
            f"control plane answered HTTP {response.status_code} to the enrollment request",
            status_code=response.status_code,
        )
    if not isinstance(payload, dict):
        raise EnrollmentError("control plane answered the enrollment request with something other than JSON")
    return payload


def _field(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise EnrollmentError(f"control plane answer lacks {name}")
    return value


def _why(exc: httpx.HTTPError) -> str:
    """An httpx failure in one line (its text can be empty, e.g. for some timeouts)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# -- the config file ----------------------------------------------------------------------------------
def config_is_empty(path: Path) -> bool:
    """Whether ``path`` is missing or holds nothing but white space. (A file of comments only, such
    as an installed sample, is not empty: it is a valid config, every key at its default.)"""
    try:
        return not path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return True


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML scalar, whatever it holds


def render_config(identity: Identity, *, state_dir: Path, name: str | None = None) -> str:
    """A commented ``config.yaml`` for this edge: the control plane's URL and tunnel address
    (from enrollment) and ``state_dir`` set, the other common keys shown commented out."""
    tunnel = (
        f"  tunnel_address: {_q(identity.tunnel_address)}   # its gRPC tunnel, host:port\n"
        if identity.tunnel_address
        else "  # tunnel_address: HOST:7443   # the control plane named none: the edge uses the "
        "WebSocket tunnel on url\n"
    )
    name_line = (
        f"name: {_q(name)}\n" if name else "# name: build-host-17            # default: this host's name\n"
    )
    return (
        "# Outpost edge configuration, written by `outpost-edge register`\n"
        f"# for edge {identity.edge_id} in environment {identity.environment_id}.\n"
        "# Every key is described in docs/configuration.md; keys left out take their defaults.\n"
        "# Start the edge with: outpost-edge run --config THIS_FILE\n"
        "\n"
        "control_plane:\n"
        f"  url: {_q(identity.control_plane_url)}   # its HTTP(S) API: renewal, WebSocket tunnel\n"
        f"{tunnel}"
        "\n"
        "# This edge's identity (private key 0600), tool-call journal and other state.\n"
        f"state_dir: {_q(str(state_dir))}\n"
        f"{name_line}"
        "\n"
        "# What the control plane may ask of this edge (images, limits, MCP servers, egress);\n"
        "# without it, the built-in default policy applies.\n"
        "# policy_file: /etc/outpost-edge/policy.yaml\n"
        "\n"
        "# connection:\n"
        "#   transport: auto        # grpc | websocket | auto (gRPC, else WebSocket on control_plane.url)\n"
        "#   proxy_url: http://proxy.example.com:3128  # default: https_proxy/HTTPS_PROXY, minus NO_PROXY\n"
        "\n"
        "# observability:\n"
        "#   listen: 127.0.0.1:9464  # /metrics, /healthz, /readyz, /status; null turns it off\n"
        "\n"
        "# logging:\n"
        "#   level: INFO            # DEBUG, INFO, WARNING, ERROR\n"
        "#   format: plain          # plain | json\n"
    )


def check_config_target(path: Path, *, force: bool) -> None:
    """Raise :class:`EnrollmentError` unless ``render_config``'s output may be written to ``path``:
    it is missing or empty (:func:`config_is_empty`), or ``force``; it is not a directory; and
    this user may write its directory (checked before the token is spent)."""
    if path.is_dir():
        raise EnrollmentError(f"{path} is a directory, not a config file")
    if not force and not config_is_empty(path):
        raise EnrollmentError(f"{path} exists and is not empty: not overwriting it (--force replaces it)")
    directory = path.parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise EnrollmentError(f"cannot write {path}: this user may not write to {directory}")


def write_config(path: Path, text: str, *, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically, mode 0644, creating its directory; never over a
    non-empty file unless ``force``. Raises :class:`EnrollmentError`."""
    check_config_target(path, force=force)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        write_atomic(path, text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise EnrollmentError(f"cannot write the config file {path}: {exc.strerror or exc}") from None
