"""``outpost-edge doctor``: check everything the edge needs, and say in plain words what to fix.

Checks, in order (a check that cannot run because an earlier one failed is ``SKIP``)::

    config       the config file loads (the CLI reports a config that does not)
    identity     registered; the private key is 0600; the pieces belong together
    certificate  the client certificate is valid now, for at least 14 more days, and not overdue for
                 its automatic renewal (else WARN)
    docker       the engine answers, and the policy's default sandbox image is present
    proxy        which proxy the tunnel goes through (gRPC reads grpc_proxy / https_proxy /
                 http_proxy and no_grpc_proxy / no_proxy, lower case only), and that it lets
                 CONNECT through
    dns          the tunnel host resolves
    tcp          a TCP connection to the tunnel opens (through the proxy when there is one)
    tls          the mTLS handshake with this edge's identity; the server's certificate is issued
                 by the pinned CA and names the host (or control_plane.tls_server_name)
    clock        skew against the control plane's HTTP ``Date`` header (WARN > 5 s, FAIL > 5 min,
                 the CA's backdating); without a URL, against the server certificate's validity

Every network probe goes through :class:`Probes`, so unit tests substitute fakes; the real ones
(:class:`SystemProbes`) are blocking, which is fine for a command-line tool with no event loop.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Protocol, TextIO

from cryptography import x509

from edge_agent.config import EdgeConfig
from edge_agent.errors import EdgeError
from edge_agent.identity import IDENTITY_DIR, Identity
from edge_agent.renew import RenewalSchedule, spread_for

__all__ = [
    "CERT_WARN_DAYS",
    "CheckResult",
    "Doctor",
    "ProbeError",
    "Probes",
    "Proxy",
    "Status",
    "SystemProbes",
    "print_report",
    "tunnel_proxy",
]

CERT_WARN_DAYS = 14
SKEW_WARN_S = 5.0
SKEW_FAIL_S = 300.0
_TIMEOUT_S = 5.0
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class Status(enum.Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the report: what was checked, how it went, and how to fix it."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy the tunnel goes through (``CONNECT host:port``)."""

    host: str
    port: int
    source: str  # the environment variable it came from


class ProbeError(Exception):
    """A probe failed; ``kind`` says how (``refused``, ``timeout``, ``unreachable``, ``dns``,
    ``verify``, ``rejected``, ``proxy``, ``tls``, ``docker``, ``image``, ``http``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Probes(Protocol):
    """The doctor's view of the world; raise :class:`ProbeError` on failure."""

    def now(self) -> datetime: ...

    def resolve(self, host: str, port: int) -> list[str]: ...

    def tcp(self, host: str, port: int, proxy: Proxy | None) -> None: ...

    def tls(
        self,
        host: str,
        port: int,
        proxy: Proxy | None,
        *,
        server_name: str,
        ca_pem: bytes,
        cert_file: Path,
        key_file: Path,
    ) -> bytes:
        """Handshake (mTLS), check the server; return the server certificate (DER)."""
        ...

    def docker(self, base_url: str | None, image: str) -> bool:
        """Ping the engine; return whether ``image`` is present."""
        ...

    def http_date(self, url: str) -> datetime | None:
        """The ``Date`` header of a GET of ``url`` (None if there is none)."""
        ...


def tunnel_proxy(host: str, env: Mapping[str, str]) -> Proxy | None:
    """The proxy gRPC would use to reach ``host``, by its rules (lower-case variables only)."""
    for name in ("grpc_proxy", "https_proxy", "http_proxy"):
        value = env.get(name, "").strip()
        if value:
            break
    else:
        return None
    no_proxy = env.get("no_grpc_proxy", "") or env.get("no_proxy", "")
    if _bypassed(host, no_proxy):
        return None
    parts = urllib.parse.urlsplit(value if "://" in value else f"http://{value}")
    if not parts.hostname:
        return None
    return Proxy(parts.hostname, parts.port or 80, name)


def _bypassed(host: str, no_proxy: str) -> bool:
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        entry = entry.lstrip(".")
        if host.lower() == entry or host.lower().endswith("." + entry):
            return True
        with_net = "/" in entry
        try:
            if with_net and ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class Doctor:
    """Runs the checks for one config; :meth:`run` returns them all, in order."""

    def __init__(self, config: EdgeConfig, probes: Probes, env: Mapping[str, str]) -> None:
        self.config = config
        self.probes = probes
        self.env = env

    def run(self) -> list[CheckResult]:
        results = [CheckResult("config", Status.OK, "configuration is valid")]
        identity, check = self._identity()
        results.append(check)
        results.append(self._certificate(identity))
        results.append(self._docker())
        address = self.config.control_plane.tunnel_address or (identity.tunnel_address if identity else None)
        if not address:
            results.append(
                CheckResult(
                    "tunnel",
                    Status.FAIL,
                    "no tunnel address: neither the config nor the identity names one",
                    "set control_plane.tunnel_address: HOST:PORT in the config",
                )
            )
            return [*results, *(CheckResult(n, Status.SKIP, "no tunnel address") for n in _NET)]
        try:
            host, port = _split_address(address)
        except ValueError as exc:
            results.append(
                CheckResult("tunnel", Status.FAIL, str(exc), "write control_plane.tunnel_address HOST:PORT")
            )
            return [*results, *(CheckResult(n, Status.SKIP, "no valid tunnel address") for n in _NET)]
        proxy, check = self._proxy(host, port)
        results.append(check)
        ok_so_far = check.status is not Status.FAIL
        results.append(self._dns(host, port, proxy) if ok_so_far else _skip("dns", "the proxy check failed"))
        ok_so_far = ok_so_far and results[-1].status is not Status.FAIL
        results.append(self._tcp(host, port, proxy) if ok_so_far else _skip("tcp", "an earlier check failed"))
        ok_so_far = ok_so_far and results[-1].status is not Status.FAIL
        server_cert: x509.Certificate | None = None
        if not ok_so_far:
            results.append(_skip("tls", "no TCP connection to the tunnel"))
        elif identity is None:
            results.append(_skip("tls", "no usable identity"))
        else:
            check, server_cert = self._tls(host, port, proxy, identity)
            results.append(check)
        results.append(self._clock(identity, server_cert))
        return results

    # -- identity ---------------------------------------------------------------------------------
    def _identity(self) -> tuple[Identity | None, CheckResult]:
        state_dir = self.config.state_dir
        try:
            identity = Identity.load(state_dir)
        except EdgeError as exc:
            fix = (
                f"fix the file mode as the message says, or register again into {state_dir}"
                if "chmod" in str(exc)
                else "register this edge: outpost-edge register --control-plane URL --token-file FILE"
            )
            return None, CheckResult("identity", Status.FAIL, str(exc), fix)
        return identity, CheckResult(
            "identity",
            Status.OK,
            f"edge {identity.edge_id} in environment {identity.environment_id}; key file is 0600",
        )

    def _certificate(self, identity: Identity | None) -> CheckResult:
        if identity is None:
            return _skip("certificate", "no usable identity")
        cert = identity.certificate
        now = self.probes.now()
        not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
        if now < not_before:
            return CheckResult(
                "certificate",
                Status.FAIL,
                f"the client certificate is not valid before {not_before:%Y-%m-%d %H:%M} UTC",
                "this host's clock is behind: enable NTP (timedatectl set-ntp true)",
            )
        left = not_after - now
        if left <= timedelta(0):
            return CheckResult(
                "certificate",
                Status.FAIL,
                f"the client certificate expired on {not_after:%Y-%m-%d} UTC",
                "an expired certificate cannot be renewed: move the identity directory aside "
                "and register this edge again with a new enrollment token (then revoke the old "
                "edge id)",
            )
        ident = self.config.identity
        schedule = RenewalSchedule(
            renew_before=timedelta(days=ident.renew_before_days),
            check_interval_s=ident.renew_check_interval_s,
            spread=spread_for(identity.edge_id),
        )
        renew_at = schedule.renew_at(not_before, not_after)
        text = (
            f"client certificate valid until {not_after:%Y-%m-%d} UTC ({left.days} days left); "
            f"renewed automatically from {renew_at:%Y-%m-%d} UTC"
        )
        overdue = now - renew_at > timedelta(seconds=ident.renew_check_interval_s) + timedelta(hours=1)
        if left < timedelta(days=CERT_WARN_DAYS) or overdue:
            return CheckResult(
                "certificate",
                Status.WARN,
                text,
                "the running edge (outpost-edge run) renews its certificate by itself, and has not yet: "
                "look for 'certificate renewal failed' in its log (control plane unreachable, edge "
                "revoked), or renew now with: outpost-edge renew-certificate --config FILE",
            )
        return CheckResult("certificate", Status.OK, text)

    # -- docker -----------------------------------------------------------------------------------
    def _docker(self) -> CheckResult:
        image = self.config.load_policy().images.default
        where = self.config.sandbox.docker_url or "the default Docker socket ($DOCKER_HOST)"
        try:
            present = self.probes.docker(self.config.sandbox.docker_url, image)
        except ProbeError as exc:
            return CheckResult(
                "docker",
                Status.FAIL,
                f"cannot reach the Docker engine at {where}: {exc}",
                "start Docker (systemctl start docker) and make sure this user may use its socket "
                "(add it to the docker group), or set sandbox.docker_url",
            )
        if not present:
            return CheckResult(
                "docker",
                Status.FAIL,
                f"the Docker engine answers, but the sandbox image {image} is not present",
                f"build or pull it (packaging/sandbox/build.sh, or docker pull {image})",
            )
        return CheckResult("docker", Status.OK, f"engine answers; sandbox image {image} is present")

    # -- network ----------------------------------------------------------------------------------
    def _proxy(self, host: str, port: int) -> tuple[Proxy | None, CheckResult]:
        proxy = tunnel_proxy(host, self.env)
        upper = [n for n in ("HTTPS_PROXY", "HTTP_PROXY") if self.env.get(n)]
        if proxy is None:
            if upper and not any(self.env.get(n.lower()) for n in upper):
                return None, CheckResult(
                    "proxy",
                    Status.WARN,
                    f"{upper[0]} is set, but the tunnel (gRPC) only reads lower-case variables: "
                    f"it connects to {host}:{port} directly",
                    f"if the tunnel must go through the proxy, also set {upper[0].lower()}",
                )
            text = f"no proxy: the tunnel connects to {host}:{port} directly"
            return None, CheckResult("proxy", Status.OK, text)
        text = f"the tunnel goes through proxy {proxy.host}:{proxy.port} (from {proxy.source})"
        return proxy, CheckResult("proxy", Status.OK, text)

    def _dns(self, host: str, port: int, proxy: Proxy | None) -> CheckResult:
        name = proxy.host if proxy else host
        try:
            addresses = self.probes.resolve(name, proxy.port if proxy else port)
        except ProbeError as exc:
            if proxy is not None:
                fix = f"check the proxy's name in {proxy.source}"
                return CheckResult("dns", Status.FAIL, f"cannot resolve the proxy {name}: {exc}", fix)
            return CheckResult(
                "dns",
                Status.FAIL,
                f"cannot resolve {name}: {exc}",
                "check the host in control_plane.tunnel_address and this host's DNS (/etc/resolv.conf)",
            )
        what = "the proxy " if proxy else ""
        return CheckResult("dns", Status.OK, f"{what}{name} resolves to {', '.join(addresses[:4])}")

    def _tcp(self, host: str, port: int, proxy: Proxy | None) -> CheckResult:
        try:
            self.probes.tcp(host, port, proxy)
        except ProbeError as exc:
            fix = _tcp_fix(exc, host, port, proxy)
            return CheckResult("tcp", Status.FAIL, f"cannot connect to {host}:{port}: {exc}", fix)
        via = f" through proxy {proxy.host}:{proxy.port}" if proxy else ""
        return CheckResult("tcp", Status.OK, f"connected to {host}:{port}{via}")

    def _tls(
        self, host: str, port: int, proxy: Proxy | None, identity: Identity
    ) -> tuple[CheckResult, x509.Certificate | None]:
        server_name = self.config.control_plane.tls_server_name or host
        directory = self.config.state_dir / IDENTITY_DIR
        try:
            der = self.probes.tls(
                host,
                port,
                proxy,
                server_name=server_name,
                ca_pem=identity.ca_pem,
                cert_file=directory / "edge.crt",
                key_file=directory / "edge.key",
            )
        except ProbeError as exc:
            if exc.kind == "verify":
                fix = (
                    "if the certificate names another host, set control_plane.tls_server_name to it; "
                    "if it was issued by another CA, this address is not your control plane (or its CA "
                    "changed): check the address, or register again"
                )
            elif exc.kind == "rejected":
                fix = "the control plane does not accept this edge's certificate: register the edge again"
            else:
                fix = "check that the address is the control plane's tunnel port, not its HTTP API"
            return CheckResult("tls", Status.FAIL, f"TLS with {host}:{port} failed: {exc}", fix), None
        cert = x509.load_der_x509_certificate(der)
        return (
            CheckResult(
                "tls",
                Status.OK,
                f"mTLS handshake done; the server certificate names {server_name} and is issued by "
                f"the pinned CA (valid until {cert.not_valid_after_utc:%Y-%m-%d})",
            ),
            cert,
        )

    def _clock(self, identity: Identity | None, server_cert: x509.Certificate | None) -> CheckResult:
        url = self.config.control_plane.url or (identity.control_plane_url if identity else None)
        fix = "enable time synchronisation (timedatectl set-ntp true, or chrony/ntpd)"
        if url:
            try:
                server_now = self.probes.http_date(url)
                local_now = self.probes.now()
            except ProbeError as exc:
                server_now = None
                reason = f"cannot read the time from {url}: {exc}"
            else:
                reason = f"{url} sent no Date header"
            if server_now is not None:
                skew = (local_now - server_now).total_seconds()
                direction = "ahead of" if skew > 0 else "behind"
                text = f"this host's clock is {abs(skew):.0f} s {direction} the control plane's"
                if abs(skew) > SKEW_FAIL_S:
                    return CheckResult("clock", Status.FAIL, text, fix)
                if abs(skew) > SKEW_WARN_S:
                    return CheckResult("clock", Status.WARN, text, fix)
                text = f"within {SKEW_WARN_S:g} s of the control plane's clock"
                return CheckResult("clock", Status.OK, text)
        else:
            reason = "no control plane URL to ask for the time"
        if server_cert is not None:
            now = self.probes.now()
            if now < server_cert.not_valid_before_utc:
                return CheckResult(
                    "clock", Status.FAIL, "this host's clock is before the server certificate's start", fix
                )
            return CheckResult("clock", Status.WARN, f"{reason}; the server certificate is valid now", "")
        return CheckResult("clock", Status.WARN, f"{reason}; clock not checked", "")


_NET = ("proxy", "dns", "tcp", "tls", "clock")


def _skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, Status.SKIP, f"not checked: {why}")


def _tcp_fix(exc: ProbeError, host: str, port: int, proxy: Proxy | None) -> str:
    if exc.kind == "proxy":
        return (
            f"the proxy refused CONNECT to {host}:{port}: allow it there, or add {host} to no_proxy "
            "if the edge may connect directly"
        )
    if proxy is not None and exc.kind in ("refused", "timeout", "unreachable"):
        return f"the proxy {proxy.host}:{proxy.port} is not reachable: check {proxy.source}"
    if exc.kind == "refused":
        return (
            f"nothing listens on {host}:{port}: start the control plane (outpost-control serve), or "
            "correct control_plane.tunnel_address"
        )
    if exc.kind == "timeout":
        return (
            f"no answer from {host}:{port}: a firewall probably drops the traffic; allow outbound TCP to "
            "it, or go through a proxy (https_proxy)"
        )
    return f"no route to {host}:{port}: check this host's network and the address"


# -- the real probes ------------------------------------------------------------------------------
class SystemProbes:
    """Probes that touch the network, Docker and the clock. Blocking: for the CLI only."""

    def __init__(self, timeout_s: float = _TIMEOUT_S, clock: Callable[[], datetime] | None = None) -> None:
        self.timeout_s = timeout_s
        self._clock = clock or (lambda: datetime.now(UTC))

    def now(self) -> datetime:
        return self._clock()

    def resolve(self, host: str, port: int) -> list[str]:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ProbeError("dns", exc.strerror or str(exc)) from None
        return sorted({str(info[4][0]) for info in infos})

    def _open(self, host: str, port: int, proxy: Proxy | None) -> socket.socket:
        target = (proxy.host, proxy.port) if proxy else (host, port)
        try:
            sock = socket.create_connection(target, timeout=self.timeout_s)
        except ConnectionRefusedError:
            raise ProbeError("refused", "connection refused") from None
        except TimeoutError:
            raise ProbeError("timeout", f"no answer within {self.timeout_s:g} s") from None
        except socket.gaierror as exc:
            raise ProbeError("dns", exc.strerror or str(exc)) from None
        except OSError as exc:
            raise ProbeError("unreachable", exc.strerror or str(exc)) from None
        if proxy is not None:
            try:
                _connect_through(sock, host, port)
            except BaseException:
                sock.close()
                raise
        return sock

    def tcp(self, host: str, port: int, proxy: Proxy | None) -> None:
        self._open(host, port, proxy).close()

    def tls(
        self,
        host: str,
        port: int,
        proxy: Proxy | None,
        *,
        server_name: str,
        ca_pem: bytes,
        cert_file: Path,
        key_file: Path,
    ) -> bytes:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem.decode())
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        try:
            context.load_cert_chain(str(cert_file), str(key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ProbeError("tls", f"cannot load this edge's certificate and key: {exc}") from None
        sock = self._open(host, port, proxy)
        try:
            with context.wrap_socket(sock, server_hostname=server_name) as tls:
                der = tls.getpeercert(binary_form=True)
                # With TLS 1.3 the server judges our certificate after the handshake: speak first
                # (the HTTP/2 preface) and read, so that a rejection shows up here.
                tls.sendall(_H2_PREFACE)
                try:
                    tls.recv(9)
                except TimeoutError:
                    pass
                except ssl.SSLError as exc:
                    raise _rejected(exc) from None
        except ssl.SSLCertVerificationError as exc:
            raise ProbeError("verify", exc.verify_message or str(exc)) from None
        except ssl.SSLError as exc:
            if "CERTIFICATE" in str(exc.reason or "").upper():
                raise _rejected(exc) from None
            raise ProbeError("tls", f"{exc.reason or exc}") from None
        except TimeoutError:
            raise ProbeError("timeout", f"no TLS answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ProbeError("tls", exc.strerror or str(exc)) from None
        finally:
            sock.close()
        if der is None:
            raise ProbeError("tls", "the server sent no certificate")
        return der

    def docker(self, base_url: str | None, image: str) -> bool:
        from edge_agent.sandbox import DockerRuntime  # the one module that speaks to Docker

        async def probe() -> bool:
            runtime = DockerRuntime(base_url=base_url, max_workers=1, timeout_s=self.timeout_s)
            try:
                await runtime.ping()
                return await runtime.image_exists(image)
            finally:
                await runtime.close()

        try:
            return asyncio.run(probe())
        except EdgeError as exc:
            raise ProbeError("docker", str(exc)) from None

    def http_date(self, url: str) -> datetime | None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ProbeError("http", f"not an http(s) URL: {url}")
        probe_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/healthz", "", ""))
        try:
            with urllib.request.urlopen(probe_url, timeout=self.timeout_s) as response:  # noqa: S310 - scheme checked
                date = response.headers.get("Date")
        except OSError as exc:
            raise ProbeError("http", str(getattr(exc, "reason", exc))) from None
        if not date:
            return None
        try:
            return parsedate_to_datetime(date).astimezone(UTC)
        except (TypeError, ValueError):
            return None


def _rejected(exc: ssl.SSLError) -> ProbeError:
    return ProbeError("rejected", f"the server refused this edge's certificate ({exc.reason})")


def _connect_through(sock: socket.socket, host: str, port: int) -> None:
    """Ask an HTTP proxy for a tunnel to ``host:port`` on ``sock``."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    reply = b""
    try:
        while b"\r\n\r\n" not in reply and len(reply) < 8192:
            chunk = sock.recv(1024)
            if not chunk:
                break
            reply += chunk
    except TimeoutError:
        raise ProbeError("proxy", "the proxy did not answer CONNECT") from None
    status = reply.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = status.split(" ", 2)
    if len(parts) < 2 or parts[1] != "200":
        raise ProbeError("proxy", f"the proxy answered CONNECT with {status or 'nothing'!r}")


def print_report(results: list[CheckResult], out: TextIO) -> int:
    """Print one line per check (and its fix); return the exit code: 1 if any check failed."""
    for result in results:
        print(f"{result.status.value:<4} {result.name}: {result.detail}", file=out)
        if result.fix and result.status in (Status.FAIL, Status.WARN):
            print(f"     fix: {result.fix}", file=out)
    failed = sum(r.status is Status.FAIL for r in results)
    warned = sum(r.status is Status.WARN for r in results)
    summary = "all checks passed" if not failed and not warned else f"{failed} failed, {warned} warning(s)"
    print(summary, file=out)
    return 1 if failed else 0
