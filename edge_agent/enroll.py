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
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import re
import ssl
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from edge_agent.errors import EdgeError
from edge_agent.identity import Identity, IdentityError, generate_key_and_csr

__all__ = ["EnrollmentError", "normalize_fingerprint", "register"]

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
    base_url = control_plane_url.rstrip("/")
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
        raise EnrollmentError(
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
        raise EnrollmentError(f"cannot reach the control plane at {url}: {exc}") from None
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
        raise EnrollmentError(
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
        raise EnrollmentError(f"cannot reach the control plane at {url}: {exc}") from None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code != 200:
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise EnrollmentError(
                error["message"],
                status_code=response.status_code,
                error_type=str(error.get("type", "")) or None,
            )
        raise EnrollmentError(
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
