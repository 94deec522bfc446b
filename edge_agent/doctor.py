"""``outpost-edge doctor``: check everything the edge needs, and say in plain words what to fix.

Checks, in order (a check that cannot run because an earlier one failed is ``SKIP``)::

    config       the config file loads (the CLI reports a config that does not)
    identity     registered; the private key is 0600; the pieces belong together
    certificate  the client certificate is valid now, for at least 14 more days, and not overdue for
                 its automatic renewal (else WARN)
    docker       the engine answers, and the policy's default sandbox image is present
    proxy        the routes the link dials (gRPC tunnel address, WebSocket URL) and the proxy each
                 goes through: the link's own resolution (``Dialer`` routes: connection.proxy_url,
                 else https_proxy / HTTPS_PROXY minus no_proxy / NO_PROXY), not a second one
    dns          the first route's host (or its proxy) resolves
    tcp          a TCP connection to it opens (through that proxy when there is one)
    tls          for the gRPC tunnel: the mTLS handshake with this edge's identity; the server's
                 certificate is issued by the pinned CA and names the host (or
                 control_plane.tls_server_name)
    tunnel       a real authenticated hello, dialled exactly as the running edge dials (the same
                 ``Dialer``, routes, proxy and transport choice): the control plane welcomes it, or
                 refuses this edge (revoked, unknown: FAIL, re-enroll), or cannot be reached
    clock        skew against the control plane's HTTP ``Date`` header (WARN > 5 s, FAIL > 5 min,
                 the CA's backdating); without a URL, against the server certificate's validity

Every network probe goes through :class:`Probes`, so unit tests substitute fakes; the real ones
(:class:`SystemProbes`) are blocking, which is fine for a command-line tool with no event loop.
"""

from __future__ import annotations

import asyncio
import base64
import enum
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
from edge_agent.connection.dialer import Dialer, Route, endpoint_routes, endpoints_for
from edge_agent.connection.probe import HelloAnswer, probe_hello
from edge_agent.connection.proxy import ProxyConfig
from edge_agent.connection.selection import TransportKind
from edge_agent.connection.transport import TransportError
from edge_agent.errors import ConfigError, EdgeError
from edge_agent.identity import IDENTITY_DIR, Identity
from edge_agent.renew import RenewalSchedule, spread_for
from outpost_wire.admission import PROBE_CAPABILITY
from outpost_wire.frames import PROTOCOL_VERSION, Hello
from outpost_wire.session import SessionConfig
from outpost_wire.version import SOFTWARE_VERSION

__all__ = [
    "CERT_WARN_DAYS",
    "CheckResult",
    "Doctor",
    "HelloAnswer",
    "ProbeError",
    "Probes",
    "Status",
    "SystemProbes",
    "print_report",
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


class ProbeError(Exception):
    """A probe failed; ``kind`` says how (``refused``, ``timeout``, ``unreachable``, ``dns``,
    ``verify``, ``rejected``, ``proxy``, ``tls``, ``docker``, ``image``, ``http``; for the hello:
    ``revoked`` (a final refusal, ``reason`` names it), ``unauthenticated``, ``tunnel``)."""

    def __init__(self, kind: str, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason


class Probes(Protocol):
    """The doctor's view of the world; raise :class:`ProbeError` on failure."""

    def now(self) -> datetime: ...

    def resolve(self, host: str, port: int) -> list[str]: ...

    def tcp(self, host: str, port: int, proxy: ProxyConfig | None) -> None: ...

    def tls(
        self,
        host: str,
        port: int,
        proxy: ProxyConfig | None,
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

    def hello(self, config: EdgeConfig, identity: Identity, env: Mapping[str, str]) -> HelloAnswer:
        """An authenticated probe hello, dialled as the edge's link dials (``Dialer.for_config``)."""
        ...


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
        try:
            # The link's own endpoints and routes (edge_agent.connection.dialer): one code path.
            endpoint = endpoints_for(self.config, identity)[0]
            routes = endpoint_routes(endpoint, self.config.connection, self.env)
        except ConfigError as exc:
            results.append(
                CheckResult(
                    "proxy",
                    Status.FAIL,
                    str(exc),
                    "correct the config (docs/configuration.md), or register this edge: "
                    "outpost-edge register --control-plane URL --token-file FILE",
                )
            )
            return [*results, *(_skip(n, "no usable control-plane address") for n in _NET[1:])]
        results.append(self._proxy(routes))
        first = routes[0]
        results.append(self._dns(first))
        ok_so_far = results[-1].status is not Status.FAIL
        results.append(self._tcp(first) if ok_so_far else _skip("tcp", "an earlier check failed"))
        ok_so_far = ok_so_far and results[-1].status is not Status.FAIL
        server_cert: x509.Certificate | None = None
        if first.kind is not TransportKind.GRPC:
            results.append(
                _skip("tls", "no gRPC tunnel address: the tunnel check covers the WebSocket's TLS")
            )
        elif not ok_so_far:
            results.append(_skip("tls", "no TCP connection to the tunnel"))
        elif identity is None:
            results.append(_skip("tls", "no usable identity"))
        else:
            check, server_cert = self._tls(first, identity)
            results.append(check)
            ok_so_far = check.status is not Status.FAIL
        if identity is None:
            results.append(_skip("tunnel", "no usable identity"))
        elif not ok_so_far:
            results.append(_skip("tunnel", "an earlier network check failed"))
        else:
            results.append(self._tunnel(identity))
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

    # -- network ---------------------------------------------------------------------------------
    def _proxy(self, routes: list[Route]) -> CheckResult:
        parts = []
        for route in routes:
            via = f"through proxy {route.proxy.redacted}" if route.proxy else "directly"
            parts.append(f"{route.kind.value} to {route.target} {via} ({route.proxy_source})")
        text = "; ".join(parts)
        plain = [n for n in ("http_proxy", "HTTP_PROXY") if self.env.get(n)]
        if plain and not any(r.proxy for r in routes) and self.config.connection.proxy_url is None:
            return CheckResult(
                "proxy",
                Status.WARN,
                f"{text}; {plain[0]} is set, but the tunnel uses only https_proxy / HTTPS_PROXY",
                "if the tunnel must go through that proxy, set connection.proxy_url (or https_proxy)",
            )
        return CheckResult("proxy", Status.OK, text)

    def _dns(self, route: Route) -> CheckResult:
        proxy = route.proxy
        name = proxy.host if proxy else route.host
        try:
            addresses = self.probes.resolve(name, proxy.port if proxy else route.port)
        except ProbeError as exc:
            if proxy is not None:
                fix = f"check the proxy's name in {route.proxy_source}"
                return CheckResult("dns", Status.FAIL, f"cannot resolve the proxy {name}: {exc}", fix)
            return CheckResult(
                "dns",
                Status.FAIL,
                f"cannot resolve {name}: {exc}",
                "check the control plane's host in the config (control_plane) and this host's DNS "
                "(/etc/resolv.conf)",
            )
        what = "the proxy " if proxy else ""
        return CheckResult("dns", Status.OK, f"{what}{name} resolves to {', '.join(addresses[:4])}")

    def _tcp(self, route: Route) -> CheckResult:
        host, port = route.host, route.port
        try:
            self.probes.tcp(host, port, route.proxy)
        except ProbeError as exc:
            fix = _tcp_fix(exc, route)
            return CheckResult("tcp", Status.FAIL, f"cannot connect to {host}:{port}: {exc}", fix)
        via = f" through proxy {route.proxy.redacted}" if route.proxy else ""
        return CheckResult("tcp", Status.OK, f"connected to {host}:{port}{via}")

    def _tls(self, route: Route, identity: Identity) -> tuple[CheckResult, x509.Certificate | None]:
        host, port = route.host, route.port
        server_name = self.config.control_plane.tls_server_name or host
        directory = self.config.state_dir / IDENTITY_DIR
        try:
            der = self.probes.tls(
                host,
                port,
                route.proxy,
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

    def _tunnel(self, identity: Identity) -> CheckResult:
        try:
            answer = self.probes.hello(self.config, identity, self.env)
        except ProbeError as exc:
            if exc.kind == "revoked":
                words = (exc.reason or "refused").replace("_", " ")
                return CheckResult(
                    "tunnel",
                    Status.FAIL,
                    f"the control plane refuses this edge ({identity.edge_id}): {words}",
                    "re-enroll: ask the operator for a new enrollment token (outpost-control tokens "
                    f"create --environment {identity.environment_id}), then outpost-edge register "
                    "--force --control-plane URL --token-file FILE --config CONFIG; the running "
                    "edge has stopped (exit code 3) and stays stopped until then",
                )
            if exc.kind == "unauthenticated":
                fix = (
                    "check this host's clock (timedatectl set-ntp true); if the refusal stays, "
                    "re-enroll this edge"
                )
            else:
                fix = (
                    "the running edge dials the same way and fails the same way: check the "
                    "address, proxy and TLS checks above, and the control plane's log"
                )
            return CheckResult("tunnel", Status.FAIL, f"no authenticated hello: {exc}", fix)
        over = f" over {answer.transport.value}" if answer.transport is not None else ""
        return CheckResult(
            "tunnel",
            Status.OK,
            f"authenticated hello answered{over} by control plane {answer.control_plane_id} "
            f"(version {answer.software_version}) in {answer.took_s:.2f} s",
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


_NET = ("proxy", "dns", "tcp", "tls", "tunnel", "clock")


def _skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, Status.SKIP, f"not checked: {why}")


def _tcp_fix(exc: ProbeError, route: Route) -> str:
    host, port, proxy = route.host, route.port, route.proxy
    if exc.kind == "proxy":
        return (
            f"the proxy refused CONNECT to {host}:{port}: allow it there, or add {host} to no_proxy "
            "if the edge may connect directly"
        )
    if proxy is not None and exc.kind in ("refused", "timeout", "unreachable"):
        return f"the proxy {proxy.redacted} is not reachable: check {route.proxy_source}"
    if exc.kind == "refused":
        return (
            f"nothing listens on {host}:{port}: start the control plane (outpost-control serve), or "
            "correct the control plane's address in the config"
        )
    if exc.kind == "timeout":
        return (
            f"no answer from {host}:{port}: a firewall probably drops the traffic; allow outbound TCP to "
            "it, or go through a proxy (connection.proxy_url or https_proxy)"
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

    def _open(self, host: str, port: int, proxy: ProxyConfig | None) -> socket.socket:
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
                _connect_through(sock, host, port, proxy)
            except BaseException:
                sock.close()
                raise
        return sock

    def tcp(self, host: str, port: int, proxy: ProxyConfig | None) -> None:
        self._open(host, port, proxy).close()

    def tls(
        self,
        host: str,
        port: int,
        proxy: ProxyConfig | None,
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

    def hello(self, config: EdgeConfig, identity: Identity, env: Mapping[str, str]) -> HelloAnswer:
        return _probe_hello(config, identity, env)

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


def _probe_hello(config: EdgeConfig, identity: Identity, env: Mapping[str, str]) -> HelloAnswer:
    """The real hello (:class:`SystemProbes`): the edge's own dialer, remembering nothing."""
    try:
        dialer = Dialer.for_config(
            config,
            identity,
            max_frame_bytes=SessionConfig().max_frame_bytes,
            env=env,
            remember=False,  # the doctor may run as another user: leave the state directory alone
        )
    except ConfigError as exc:
        raise ProbeError("tunnel", str(exc)) from None
    hello = Hello(
        edge_id=identity.edge_id,
        software_version=SOFTWARE_VERSION,
        protocol_version=PROTOCOL_VERSION,
        capabilities=(PROBE_CAPABILITY,),
        policy_digest=config.load_policy().digest(),
        sandbox_capacity=0,
        sandboxes_in_use=0,
        environment_id=identity.environment_id,
    )
    try:
        return asyncio.run(probe_hello(dialer, hello, answer_timeout_s=config.connection.connect_timeout_s))
    except TransportError as exc:
        if exc.refusal is not None:
            raise ProbeError("revoked", str(exc), reason=exc.refusal) from None
        raise ProbeError("unauthenticated" if exc.unauthenticated else "tunnel", str(exc)) from None


def _rejected(exc: ssl.SSLError) -> ProbeError:
    return ProbeError("rejected", f"the server refused this edge's certificate ({exc.reason})")


def _connect_through(sock: socket.socket, host: str, port: int, proxy: ProxyConfig) -> None:
    """Ask an HTTP proxy for a tunnel to ``host:port`` on ``sock`` (with the proxy URL's
    credentials, as the link's transports send them)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    auth = ""
    if proxy.username is not None:
        basic = base64.b64encode(f"{proxy.username}:{proxy.password or ''}".encode()).decode()
        auth = f"Proxy-Authorization: Basic {basic}\r\n"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode())
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
