"""``git clone`` on the edge host, with the credential in the subprocess environment only.

:class:`GitCloner` runs ``git`` as an asyncio subprocess (the event loop never blocks) into a
directory of the edge's, then checks out the requested branch or commit and points ``origin`` at
the relay URL. The credential travels as ``http.<repository URL>.extraHeader`` through
``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (:func:`git_environment`): it is
not on any command line (``ps`` shows none), is not written to the clone's ``.git/config``, and
is sent only to URLs under the repository's own URL. The remote URL itself carries no credential.

Before git runs, the edge's ``repositories`` policy (:mod:`.policy`) must allow the URL: its
scheme, its host, and every address the host resolves to (resolved once, here; a loopback,
metadata, private ... address is refused). git is then pinned to the checked addresses
(``http.curloptResolve``), never follows a redirect (``http.followRedirects=false``) and may use
only the remote's own transport (``GIT_ALLOW_PROTOCOL``: no ``file``, ``ext``, ``ssh``).

The environment is built from scratch: no system or global git config, no credential helpers, no
terminal prompts. Only the edge's own proxy and CA
settings (``HTTPS_PROXY``, ``NO_PROXY``, ``SSL_CERT_FILE``, ``GIT_SSL_CAINFO`` ...) are passed on, so
the clone reaches the server the way the edge host does. Failures become the typed
:class:`~edge_agent.errors.RepositoryError` subclasses (:func:`classify`), with git's message
redacted of every form of the credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from edge_agent.errors import (
    RepositoryAuthenticationFailed,
    RepositoryCheckoutFailed,
    RepositoryError,
    RepositoryForbidden,
    RepositoryNotFound,
)
from edge_agent.git.credentials import GitCredential
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.git.remote import RemoteUrl, redact
from outpost_wire.addresses import Resolved, Resolver, literal_address, system_resolver
from outpost_wire.frames import Repository

__all__ = ["GitCloner", "classify", "git_environment"]

log = logging.getLogger(__name__)

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_PASSED_ON = (
    "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
    "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
)  # fmt: skip
_MAX_MESSAGE = 400
_HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*@\{)[^\x00-\x20~^:?*\[\\\x7f]{1,255}(?<!\.lock)(?<![/.])$")

# (pattern in git's stderr, error class), first match wins; git runs with LC_ALL=C.
_RULES: tuple[tuple[re.Pattern[str], type[RepositoryError]], ...] = (
    (re.compile(r"Remote branch .* not found", re.I), RepositoryCheckoutFailed),
    (re.compile(r"returned error: 40[17]|Authentication failed|could not read (Username|Password)"),
     RepositoryAuthenticationFailed),
    (re.compile(r"returned error: 403"), RepositoryForbidden),
    (re.compile(r"returned error: 404|repository '.*' not found|not found: did you run git"),
     RepositoryNotFound),
)  # fmt: skip


def classify(stderr: str) -> type[RepositoryError]:
    """The error class for a failed ``git clone``'s stderr."""
    for pattern, cls in _RULES:
        if pattern.search(stderr):
            return cls
    return RepositoryError


def git_environment(
    remote: RemoteUrl,
    credential: GitCredential | None,
    home: Path,
    *,
    path: str = _SAFE_PATH,
    host_env: Mapping[str, str] | None = None,
    pinned: Resolved | None = None,
) -> dict[str, str]:
    """The complete environment of the edge's git subprocesses for ``remote``; ``host_env`` (the
    edge's environment by default) supplies only the proxy and CA settings; ``pinned``: the
    checked addresses of the remote's host, the only ones git may connect to."""
    source = os.environ if host_env is None else host_env
    env = {name: source[name] for name in _PASSED_ON if name in source}
    env |= {
        "PATH": path,
        "HOME": str(home),
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ALLOW_PROTOCOL": remote.scheme,  # only the remote's own transport
        "GIT_CONFIG_COUNT": "0",
    }
    settings = [("credential.helper", ""), ("http.followRedirects", "false")]
    if pinned is not None and literal_address(remote.host) is None:
        port = remote.port or (443 if remote.scheme == "https" else 80)
        addresses = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in pinned.addresses)
        settings.append(("http.curloptResolve", f"{remote.host}:{port}:{addresses}"))
    if credential is not None:
        settings.append((f"http.{remote.url}.extraHeader", f"Authorization: {credential.authorization()}"))
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    return env


def check_checkout(repository: Repository) -> None:
    """Refuse a branch name or commit sha that git would read as an option or a path trick."""
    kind, ref = repository.checkout_kind, repository.checkout_ref
    if kind == "commit" and not _HEX.match(ref):
        raise RepositoryCheckoutFailed(repository.url, f"{ref!r:.80} is not a commit sha")
    if kind == "branch" and not _BRANCH.match(ref):
        raise RepositoryCheckoutFailed(repository.url, f"{ref!r:.80} is not a valid branch name")


class GitCloner:
    """Clones one repository at a time into a directory the caller owns."""

    def __init__(
        self,
        *,
        timeout_s: float = 600.0,
        git: str = "git",
        policy: RepositoryPolicy | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        """``policy``: the edge's ``repositories`` rule (default: nothing allowed);
        ``resolver``: a test hook (the system resolver by default)."""
        self._timeout_s = timeout_s
        self._git = git
        self.policy = policy or RepositoryPolicy()
        self._resolver = resolver

    async def clone(
        self,
        repository: Repository,
        remote: RemoteUrl,
        dest: Path,
        credential: GitCredential | None,
        *,
        origin_url: str,
    ) -> None:
        """Clone into ``dest`` (must not exist; its parent is scratch space of the caller),
        check out the requested ref, and set ``origin`` to ``origin_url``. Raises
        :class:`~edge_agent.errors.RepositoryError` (a subclass when the cause is known)."""
        check_checkout(repository)
        pinned = await self.policy.resolve(remote, resolver=self._resolver)  # RepositoryRefused
        home = dest.parent / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        env = git_environment(remote, credential, home, pinned=pinned)
        secrets = credential.redactions() if credential is not None else ()
        url = remote.url
        try:
            async with asyncio.timeout(self._timeout_s):
                args = ["clone", "--quiet", "--origin", "origin"]
                if repository.checkout_kind == "branch":
                    args += ["--branch", repository.checkout_ref]
                elif repository.checkout_kind == "commit":
                    args += ["--no-checkout"]
                await self._git_ok([*args, "--", url, str(dest)], env, url, secrets, cwd=dest.parent)
                if repository.checkout_kind == "commit":
                    await self._checkout_commit(repository, dest, env, secrets)
                await self._git_ok(["remote", "set-url", "origin", origin_url], env, url, secrets, cwd=dest)
        except TimeoutError:
            raise RepositoryError(url, f"clone did not finish within {self._timeout_s:g} s") from None
        except RepositoryAuthenticationFailed as exc:
            raise RepositoryAuthenticationFailed(url, _auth_reason(remote, credential, exc.reason)) from None
        log.info(
            "cloned %s (%s%s) with %s credential",
            url,
            repository.checkout_kind or "default branch",
            f" {repository.checkout_ref}" if repository.checkout_ref else "",
            credential.origin if credential is not None else "no",
        )

    async def _checkout_commit(
        self, repository: Repository, dest: Path, env: dict[str, str], secrets: Sequence[str]
    ) -> None:
        sha = repository.checkout_ref
        code, _ = await self._run(["rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}"], env, cwd=dest)
        if code != 0:
            raise RepositoryCheckoutFailed(repository.url, f"commit {sha} is not in the repository")
        code, err = await self._run(["checkout", "--quiet", "--force", "--detach", sha], env, cwd=dest)
        if code != 0:
            raise RepositoryCheckoutFailed(repository.url, _message(err, secrets))

    async def _git_ok(
        self, args: list[str], env: dict[str, str], url: str, secrets: Sequence[str], *, cwd: Path
    ) -> None:
        code, err = await self._run(args, env, cwd=cwd)
        if code != 0:
            raise classify(err)(url, _message(err, secrets))

    async def _run(self, args: list[str], env: dict[str, str], *, cwd: Path) -> tuple[int, str]:
        """Run git; (exit code, stderr). If the caller is cancelled (or times out), git and its
        helpers (``git remote-http`` ...) are killed: they run in a process group of their own."""
        proc = await asyncio.create_subprocess_exec(
            self._git,
            *args,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = await proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await proc.wait()
            raise
        return int(proc.returncode or 0), err.decode("utf-8", "replace")


def _auth_reason(remote: RemoteUrl, credential: GitCredential | None, detail: str) -> str:
    if credential is None:
        return (
            f"the server asks for a credential, and neither the session (authorization_token) nor "
            f"this edge (git.credentials for {remote.authority}) has one ({detail})"
        )
    source = "the session's authorization_token" if credential.origin == "delivered" else "this edge's"
    return f"the server refused {source} credential ({detail})"


def _message(stderr: str, secrets: Sequence[str]) -> str:
    """git's last meaningful lines, redacted and bounded."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = redact(" | ".join(lines[-3:]) or "git failed without a message", secrets)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."
