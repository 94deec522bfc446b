"""A git smart-HTTP server for tests: ``git http-backend`` (CGI) behind a small threaded HTTP server
on 127.0.0.1 that requires a credential (Basic with any user name, or Bearer), so credentials
matter. Bare repositories live under ``root``; every request is recorded (path, whether and how it
was authorized) for assertions."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str  # "", "ok", "wrong"
    status: int = 0


@dataclass
class GitHttpServer:
    root: Path
    token: str
    bearer_only: bool = False
    seen: list[Seen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def url(self, name: str) -> str:
        return f"http://{LOOPBACK}:{self.port}/{name}"

    def start(self) -> GitHttpServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner._serve(self)

            def do_POST(self) -> None:
                owner._serve(self)

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _check(self, header: str) -> str:
        if not header:
            return ""
        scheme, _, value = header.partition(" ")
        if scheme == "Bearer":
            return "ok" if value == self.token else "wrong"
        if scheme == "Basic" and not self.bearer_only:
            try:
                _user, _, secret = base64.b64decode(value).decode().partition(":")
            except ValueError:
                return "wrong"
            return "ok" if secret == self.token else "wrong"
        return "wrong"

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        seen = Seen(h.command, h.path, self._check(h.headers.get("Authorization", "")))
        self.seen.append(seen)
        body = self._read_body(h)
        if seen.authorization != "ok":
            seen.status = 401
            h.send_response(401)
            h.send_header("WWW-Authenticate", 'Basic realm="test"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        url = urlsplit(h.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "tester",
            "REQUEST_METHOD": h.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": h.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root),
        }
        for name in ("Git-Protocol", "Content-Encoding"):
            if name in h.headers:
                env["HTTP_" + name.upper().replace("-", "_")] = h.headers[name]
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False, timeout=60
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        seen.status = status
        h.send_response(status)
        for name, value in headers:
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    @staticmethod
    def _read_body(h: BaseHTTPRequestHandler) -> bytes:
        if "chunked" in h.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
        return h.rfile.read(int(h.headers.get("Content-Length", "0") or 0))


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git on the test host (no global config) and return its stdout."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd or "/"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Upstream",
        "GIT_AUTHOR_EMAIL": "upstream@example.test",
        "GIT_COMMITTER_NAME": "Upstream",
        "GIT_COMMITTER_EMAIL": "upstream@example.test",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def make_repo(root: Path, name: str, files: dict[str, str], *, branch: str = "main") -> Path:
    """A bare repository ``root/name`` with one commit of ``files`` on ``branch`` (its HEAD), and
    a feature branch ``feature`` with one more file."""
    bare = root / name
    git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare))
    work = root / f"{name}.work"
    git("init", "--quiet", f"--initial-branch={branch}", str(work))
    for path, content in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content)
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "initial", cwd=work)
    git("push", "--quiet", str(bare), f"{branch}:{branch}", cwd=work)
    git("checkout", "--quiet", "-b", "feature", cwd=work)
    (work / "feature.txt").write_text("feature\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "feature", cwd=work)
    git("push", "--quiet", str(bare), "feature:feature", cwd=work)
    git("checkout", "--quiet", branch, cwd=work)
    return bare


def upstream_commit(root: Path, name: str, path: str, content: str, message: str) -> str:
    """A new commit on the default branch of ``root/name``, made outside the sandbox; its sha."""
    work = root / f"{name}.work"
    git("pull", "--quiet", str(root / name), cwd=work)
    (work / path).write_text(content)
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)
    git("push", "--quiet", str(root / name), "HEAD", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)
