"""How ``outpost-control``'s operator commands talk to the HTTP API: the flags every such command
takes, the API key and TLS trust they resolve to, and one place that turns transport and HTTP
failures into :mod:`outpost_wire.cli_support` errors (and so into documented exit codes):

    cannot connect (refused, DNS, connect timeout) ..... UnreachableError   exit 4
    401 / 403 (the API key refused) .................... RefusedError      exit 3
    400 / 413 / 422, bad --url, untrusted certificate .. UsageError        exit 2
    anything else (404, 409, 5xx) ...................... CliError          exit 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from outpost_wire.cli_support import CliError, RefusedError, UnreachableError, UsageError, env_help

__all__ = ["ADMIN_KEY_FILE", "DEFAULT_URL", "add_client_flags", "call", "open_stream"]

DEFAULT_URL = "http://127.0.0.1:8080"
ADMIN_KEY_FILE = "admin-api-key"  # control_plane.server.ADMIN_KEY_FILE, without importing the server
_TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # exec may run a long tool call
_STREAM_TIMEOUT = httpx.Timeout(120.0, connect=10.0)  # the server pings idle streams every 15 s
_KEY_HINT = "pass --api-key-file FILE, set OUTPOST_API_KEY, or give the control plane's --data-dir"


def add_client_flags(sp: argparse.ArgumentParser) -> None:
    """The flags of every command that calls the API."""
    sp.add_argument(
        "--url",
        default=os.environ.get("OUTPOST_URL", DEFAULT_URL),
        help=env_help(f"the control plane's API (default {DEFAULT_URL})", "OUTPOST_URL"),
    )
    sp.add_argument(
        "--api-key-file",
        type=Path,
        help="file holding the API key (else $OUTPOST_API_KEY holds the key itself, else the admin "
        "key in --data-dir)",
    )
    sp.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("OUTPOST_DATA_DIR"),
        help=env_help("the control plane's data directory: its admin API key and CA", "OUTPOST_DATA_DIR"),
    )
    sp.add_argument(
        "--ca-file",
        type=Path,
        default=os.environ.get("OUTPOST_CA_FILE"),
        help=env_help(
            "also trust this CA for an https --url (default: the control plane's own CA from --data-dir)",
            "OUTPOST_CA_FILE",
        ),
    )


def _read_secret_file(path: Path, what: str, hint: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist", hint=hint) from None
    except IsADirectoryError:
        raise UsageError(f"{what} {path} is a directory, not a file", hint=hint) from None
    except PermissionError:
        raise UsageError(
            f"cannot read {what} {path}: permission denied",
            hint="run as its owner (root or the service user), or " + hint,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {path}: {exc}", hint=hint) from None
    if not text:
        raise UsageError(f"{what} {path} is empty", hint=hint)
    return text


def api_key(args: argparse.Namespace) -> str:
    if args.api_key_file is not None:
        return _read_secret_file(Path(args.api_key_file), "API key file", "check --api-key-file")
    if os.environ.get("OUTPOST_API_KEY", "").strip():
        return os.environ["OUTPOST_API_KEY"].strip()
    if args.data_dir:
        return _read_secret_file(Path(args.data_dir) / ADMIN_KEY_FILE, "admin API key file", _KEY_HINT)
    raise UsageError("no API key", hint=_KEY_HINT)


def _verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """TLS trust for an ``https`` API URL: the system's CAs plus the control plane's own (a control
    plane with ``http_tls`` serves a certificate from it), from ``--ca-file`` or the data dir."""
    ca_file: Path | None = args.ca_file
    if ca_file is None and args.data_dir:
        candidate = Path(args.data_dir) / "ca" / "ca.crt"
        ca_file = candidate if candidate.is_file() else None
    if ca_file is None:
        return True
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except FileNotFoundError:
        raise UsageError(
            f"CA file {ca_file} does not exist", hint="check --ca-file / $OUTPOST_CA_FILE"
        ) from None
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"CA file {ca_file} is not a PEM certificate: {exc}") from None
    return context


def _client(args: argparse.Namespace, timeout: httpx.Timeout) -> httpx.Client:
    return httpx.Client(
        base_url=args.url,
        timeout=timeout,
        headers={"authorization": f"Bearer {api_key(args)}"},
        verify=_verify(args),
    )


@contextlib.contextmanager
def _transport_errors(url: str) -> Iterator[None]:
    """Map httpx's failures to one line each."""
    try:
        yield
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise UsageError(f"--url {url!r} is not an http:// or https:// URL ({exc})") from None
    except httpx.ConnectError as exc:
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text:
            raise UsageError(
                f"the certificate of {url} is not trusted ({text})",
                hint="a control plane serving its own certificate: pass --ca-file or --data-dir",
            ) from None
        if "WRONG_VERSION_NUMBER" in text or "SSL" in text:
            raise UsageError(
                f"TLS with {url} failed ({text})", hint="does it serve plain http://? check --url"
            ) from None
        raise UnreachableError(
            f"cannot reach the control plane at {url}: {text or type(exc).__name__}",
            hint="check --url ($OUTPOST_URL) and that `outpost-control serve` runs there",
        ) from None
    except httpx.ConnectTimeout:
        raise UnreachableError(
            f"cannot reach the control plane at {url}: connect timed out",
            hint="check --url ($OUTPOST_URL), the network path and firewalls",
        ) from None
    except httpx.TimeoutException:
        raise CliError(f"{url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise UnreachableError(f"lost the connection to {url}: {exc or type(exc).__name__}") from None


def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        data = response.json()
    except ValueError:
        data = None
    err = data.get("error", {}) if isinstance(data, dict) else {}
    err = err if isinstance(err, dict) else {}
    message = str(err.get("message") or response.text.strip()[:200] or response.reason_phrase)
    line = f"{response.status_code} {err.get('type') or 'error'}: {message}"
    if response.status_code in (401, 403):
        raise RefusedError(
            f"the control plane refused the API key ({line})",
            hint="check --api-key-file or $OUTPOST_API_KEY (the admin key is DATA_DIR/admin-api-key)",
        )
    if response.status_code in (400, 413, 422):
        raise UsageError(line)
    raise CliError(line)


def call(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Any:
    """One API call; the decoded JSON answer. Every failure is a :class:`CliError`."""
    with _transport_errors(args.url), _client(args, _TIMEOUT) as client:
        response = client.request(method, path, json=body, params=params)
    _raise_for_status(response)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise CliError(
            f"{args.url}{path} answered {response.headers.get('content-type', 'something')}, not JSON",
            hint="is --url an Outpost control plane?",
        ) from None


@contextlib.contextmanager
def open_stream(
    args: argparse.Namespace, path: str, params: Mapping[str, Any] | None = None
) -> Iterator[Iterator[tuple[str, str, str]]]:
    """A Server-Sent Events stream: yields an iterator of ``(event, data, id)``, ping frames
    included. Transport failures while reading raise :class:`UnreachableError`."""
    with (
        _transport_errors(args.url),
        _client(args, _STREAM_TIMEOUT) as client,
        client.stream("GET", path, params=params, headers={"accept": "text/event-stream"}) as response,
    ):
        if response.status_code >= 400:
            response.read()
        _raise_for_status(response)
        yield _sse_frames(response)


def _sse_frames(response: httpx.Response) -> Iterator[tuple[str, str, str]]:
    event, frame_id = "", ""
    data: list[str] = []
    for line in response.iter_lines():
        if not line:
            if data or event:
                yield event or "message", "\n".join(data), frame_id
            event, frame_id = "", ""
            data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            frame_id = value
