"""Which of the installed ``anthropic`` SDK's Managed Agents methods an Outpost control plane serves.

::

    python scripts/api_coverage.py                                    # starts its own control plane
    python scripts/api_coverage.py --base-url URL --api-key-file FILE  # checks a running one

It walks the SDK's ``client.beta`` resources that belong to Managed Agents (found by introspection:
a method the SDK gains is checked without a change here), calls every method through the SDK with
plausible arguments (the objects a call needs are made first; their ids feed the later calls, and
the destructive calls come last, most on objects made for them), and sorts each method into:

* ``served``     — 2xx, and the reply validates strictly (pydantic strict mode, from its JSON) against
  the SDK's own model; a stream opened and yielded a valid event (or closed cleanly); a binary
  download answered 2xx;
* ``refused``    — a 4xx other than the unrouted-path 404 (e.g. a 400 "not supported yet");
* ``not routed`` — the 404 ``unsupported_path`` Outpost answers for a path no route serves;
* ``error``      — a 5xx, a reply the SDK's model rejects, a broken stream: always a bug.

It prints one line per method and ``served N of M``; the exit status is 1 when any method is in
``error``, else 0. Started by itself, it runs ``outpost-control serve`` in a temporary directory on
127.0.0.1 with the local scripted model server (``scripted_model``) as the model endpoint: nothing
leaves the machine. Against another control plane, it creates (and mostly archives or deletes)
objects named ``coverage-*`` there, and sends user messages to a session it created (which runs a
turn on that control plane's model). Run it from the repository's root.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import inspect
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import anthropic
import pydantic
from anthropic._resource import AsyncAPIResource
from anthropic._response import AsyncAPIResponse

ROOT = Path(__file__).resolve().parents[1]

#: The top-level ``client.beta`` resources that are the Managed Agents API (checked).
MANAGED_AGENTS = (
    "agents",
    "environments",
    "sessions",
    "vaults",
    "memory_stores",
    "files",
    "skills",
    "dreams",
    "deployments",
    "deployment_runs",
    "tunnels",
)
#: The other top-level ``client.beta`` resources (not Managed Agents; not checked).
OTHER_APIS = ("messages", "models", "webhooks", "user_profiles", "compliance", "organization", "bedrock")

SERVED, REFUSED, NOT_ROUTED, ERROR, UNPLANNED = "served", "refused", "not routed", "error", "unplanned"
UNSUPPORTED_PATH = "unsupported_path"  # the error_code of Outpost's 404 for a path no route serves
MODEL = "claude-opus-4-8"
MCP_URL = "https://mcp.example.com/mcp"  # stored, never dialled (no refresh token to validate with)
REPO_URL = "https://github.com/example/coverage"  # cloned only by an edge; none is connected
STREAM_WAIT_S = 30.0
SKILL_MD = b"---\nname: coverage\ndescription: A skill the API coverage check uploads.\n---\n\nSay hi.\n"


def _message(text: str) -> dict[str, Any]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


class Ids(dict[str, Any]):
    """Ids of the objects made so far, by the SDK's parameter names; a missing one is a placeholder
    (its call then meets a 404, or the unrouted path's 404)."""

    def __missing__(self, key: str) -> Any:
        return 1 if key == "version" else f"{key.removesuffix('_id')}_coverage_missing"


# The calls go through ``client.beta.with_raw_response``: the same methods, answering the HTTP
# reply too, so that the reply's own JSON is what is validated (not the SDK's lenient parse of it).
Beta = anthropic.resources.beta.AsyncBetaWithRawResponse
Call = Callable[[Beta, Ids], Awaitable[Any]]


async def parse(result: Any) -> Any:
    """What the SDK makes of a raw reply (a model, a page, a stream); anything else as it is."""
    return await result.parse() if isinstance(result, AsyncAPIResponse) else result


def keep(key: str, call: Call, attr: str = "id") -> Call:
    """``call``, whose result's ``attr`` is kept as ``ids[key]``."""

    async def run(beta: Beta, ids: Ids) -> Any:
        result = await call(beta, ids)
        ids[key] = getattr(await parse(result), attr)
        return result

    return run


async def victim(make: Callable[[], Awaitable[Any]]) -> str:
    """The id of an object made to be archived or deleted; a placeholder when it cannot be made
    (the call under test then gets whatever its route answers for an unknown id)."""
    try:
        return str((await parse(await make())).id)
    except anthropic.APIStatusError:
        return "coverage_missing"


async def read_stream(open_stream: Awaitable[Any], then: Callable[[], Awaitable[Any]] | None) -> Any:
    """Open a stream, run ``then`` (which should make an event), return the first event (None if
    the stream closed without one)."""
    stream = await parse(await open_stream)
    try:
        task = asyncio.ensure_future(then()) if then is not None else None
        try:
            async with asyncio.timeout(STREAM_WAIT_S):
                async for event in stream:
                    return event
        finally:
            if task is not None:
                await task
        return None
    finally:
        await stream.close()


def _ca_pem() -> str:
    """A self-signed CA certificate (what ``tunnels.certificates.create`` takes)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coverage CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# -- the plan: a call per method, in the order they run -----------------------------------------


async def _session_create(b: Beta, ids: Ids) -> Any:
    repository = {"type": "github_repository", "url": REPO_URL, "authorization_token": "coverage-token"}
    result = await b.sessions.create(
        agent=ids["agent_id"], environment_id=ids["environment_id"], title="coverage", resources=[repository]
    )
    session = await parse(result)
    ids["session_id"] = session.id
    if session.resources:
        ids["resource_id"] = session.resources[0].id
    return result


async def _skill_create(b: Beta, ids: Ids) -> Any:
    result = await b.skills.create(display_name="coverage", files=[("coverage/SKILL.md", SKILL_MD)])
    skill = await parse(result)
    ids["skill_id"] = skill.id
    ids["version"] = skill.latest_version_id
    return result


async def _memory_versions_list(b: Beta, ids: Ids) -> Any:
    result = await b.memory_stores.memory_versions.list(ids["memory_store_id"])
    page = await parse(result)
    if page.data:  # newest first: the oldest is the memory's first content, no longer current
        ids["memory_version_id"] = page.data[-1].id
    return result


async def _work_poll(b: Beta, ids: Ids) -> Any:
    result = await b.environments.work.poll(ids["environment_id"], block_ms=0)
    work = await parse(result)
    if work is not None:
        ids["work_id"] = work.id
    return result


async def _threads_list(b: Beta, ids: Ids) -> Any:
    result = await b.sessions.threads.list(ids["session_id"])
    page = await parse(result)
    if page.data:
        ids["thread_id"] = page.data[0].id
    return result


async def _dream_cancel(b: Beta, ids: Ids) -> Any:
    """A fresh dream canceled at once (the planned one may have ended by now: a 400), kept for
    ``dreams.archive`` (a canceled dream may be archived)."""
    inputs: Any = [
        {"type": "memory_store", "memory_store_id": ids["memory_store_id"]},
        {"type": "sessions", "session_ids": [ids["session_id"]]},
    ]
    fresh = await parse(await b.dreams.create(model=MODEL, inputs=inputs))
    ids["canceled_dream_id"] = fresh.id
    return await b.dreams.cancel(fresh.id)


async def _download(response: Awaitable[Any]) -> bytes:
    return bytes(await (await response).read())  # a 2xx with content: served


def _plan() -> dict[str, Call]:  # one table, read top to bottom
    env = {"type": "self_hosted"}
    mcp_oauth = {"type": "mcp_oauth", "mcp_server_url": MCP_URL, "access_token": "coverage-access-token"}
    return {
        # environments, agents
        "environments.create": keep(
            "environment_id", lambda b, i: b.environments.create(name="coverage", config=env)
        ),
        "environments.retrieve": lambda b, i: b.environments.retrieve(i["environment_id"]),
        "environments.update": lambda b, i: b.environments.update(i["environment_id"], description="c"),
        "environments.list": lambda b, i: b.environments.list(),
        "agents.create": keep(
            "agent_id", lambda b, i: b.agents.create(name="coverage", model=MODEL, system="Be brief.")
        ),
        "agents.retrieve": keep("agent_version", lambda b, i: b.agents.retrieve(i["agent_id"]), "version"),
        "agents.update": lambda b, i: b.agents.update(
            i["agent_id"], version=i["agent_version"], description="coverage agent"
        ),
        "agents.list": lambda b, i: b.agents.list(),
        "agents.versions.list": lambda b, i: b.agents.versions.list(i["agent_id"]),
        # vaults and credentials
        "vaults.create": keep("vault_id", lambda b, i: b.vaults.create(display_name="coverage")),
        "vaults.retrieve": lambda b, i: b.vaults.retrieve(i["vault_id"]),
        "vaults.update": lambda b, i: b.vaults.update(i["vault_id"], display_name="coverage 2"),
        "vaults.list": lambda b, i: b.vaults.list(),
        "vaults.credentials.create": keep(
            "credential_id", lambda b, i: b.vaults.credentials.create(i["vault_id"], auth=mcp_oauth)
        ),
        "vaults.credentials.retrieve": lambda b, i: b.vaults.credentials.retrieve(
            i["credential_id"], vault_id=i["vault_id"]
        ),
        "vaults.credentials.update": lambda b, i: b.vaults.credentials.update(
            i["credential_id"], vault_id=i["vault_id"], display_name="coverage credential"
        ),
        "vaults.credentials.list": lambda b, i: b.vaults.credentials.list(i["vault_id"]),
        "vaults.credentials.mcp_oauth_validate": lambda b, i: b.vaults.credentials.mcp_oauth_validate(
            i["credential_id"], vault_id=i["vault_id"]
        ),
        # files (before sessions: a session resource names one)
        "files.upload": keep(
            "file_id", lambda b, i: b.files.upload(file=("coverage.txt", b"hello\n", "text/plain"))
        ),
        "files.retrieve_metadata": lambda b, i: b.files.retrieve_metadata(i["file_id"]),
        "files.list": lambda b, i: b.files.list(),
        "files.download": lambda b, i: _download(b.files.download(i["file_id"])),
        # memory stores (before sessions: a session resource names one)
        "memory_stores.create": keep(
            "memory_store_id", lambda b, i: b.memory_stores.create(name="coverage", description="c")
        ),
        "memory_stores.retrieve": lambda b, i: b.memory_stores.retrieve(i["memory_store_id"]),
        "memory_stores.update": lambda b, i: b.memory_stores.update(i["memory_store_id"], description="d"),
        "memory_stores.list": lambda b, i: b.memory_stores.list(),
        "memory_stores.memories.create": keep(
            "memory_id",
            lambda b, i: b.memory_stores.memories.create(
                i["memory_store_id"], path="/coverage/notes.md", content="first\n"
            ),
        ),
        "memory_stores.memories.retrieve": lambda b, i: b.memory_stores.memories.retrieve(
            i["memory_id"], memory_store_id=i["memory_store_id"], view="full"
        ),
        "memory_stores.memories.update": lambda b, i: b.memory_stores.memories.update(
            i["memory_id"], memory_store_id=i["memory_store_id"], content="second\n"
        ),
        "memory_stores.memories.list": lambda b, i: b.memory_stores.memories.list(i["memory_store_id"]),
        "memory_stores.memory_versions.list": _memory_versions_list,
        "memory_stores.memory_versions.retrieve": lambda b, i: b.memory_stores.memory_versions.retrieve(
            i["memory_version_id"], memory_store_id=i["memory_store_id"]
        ),
        "memory_stores.memory_versions.redact": lambda b, i: b.memory_stores.memory_versions.redact(
            i["memory_version_id"], memory_store_id=i["memory_store_id"]
        ),
        # skills
        "skills.create": _skill_create,
        "skills.retrieve": lambda b, i: b.skills.retrieve(i["skill_id"]),
        "skills.list": lambda b, i: b.skills.list(),
        "skills.versions.create": keep(
            "version",
            lambda b, i: b.skills.versions.create(i["skill_id"], files=[("coverage/SKILL.md", SKILL_MD)]),
        ),
        "skills.versions.retrieve": lambda b, i: b.skills.versions.retrieve(
            i["version"], skill_id=i["skill_id"]
        ),
        "skills.versions.list": lambda b, i: b.skills.versions.list(i["skill_id"]),
        "skills.versions.download": lambda b, i: _download(
            b.skills.versions.download(i["version"], skill_id=i["skill_id"])
        ),
        # sessions, their resources, events and threads
        "sessions.create": _session_create,
        "sessions.retrieve": lambda b, i: b.sessions.retrieve(i["session_id"]),
        "sessions.update": lambda b, i: b.sessions.update(i["session_id"], title="coverage 2"),
        "sessions.list": lambda b, i: b.sessions.list(),
        "sessions.resources.list": lambda b, i: b.sessions.resources.list(i["session_id"]),
        "sessions.resources.retrieve": lambda b, i: b.sessions.resources.retrieve(
            i["resource_id"], session_id=i["session_id"]
        ),
        "sessions.resources.update": lambda b, i: b.sessions.resources.update(
            i["resource_id"], session_id=i["session_id"], authorization_token="coverage-token-2"
        ),
        "sessions.resources.add": lambda b, i: b.sessions.resources.add(
            i["session_id"], type="file", file_id=i["file_id"]
        ),
        "sessions.events.send": lambda b, i: b.sessions.events.send(
            i["session_id"], events=[_message("Say hi.")]
        ),
        "sessions.events.list": lambda b, i: b.sessions.events.list(i["session_id"]),
        "sessions.events.stream": lambda b, i: read_stream(
            b.sessions.events.stream(i["session_id"]),
            lambda: b.sessions.events.send(i["session_id"], events=[_message("Again.")]),
        ),
        "sessions.threads.list": _threads_list,
        "sessions.threads.retrieve": lambda b, i: b.sessions.threads.retrieve(
            i["thread_id"], session_id=i["session_id"]
        ),
        "sessions.threads.events.list": lambda b, i: b.sessions.threads.events.list(
            i["thread_id"], session_id=i["session_id"]
        ),
        "sessions.threads.events.stream": lambda b, i: read_stream(
            b.sessions.threads.events.stream(i["thread_id"], session_id=i["session_id"]),
            lambda: b.sessions.events.send(i["session_id"], events=[_message("And again.")]),
        ),
        "sessions.threads.archive": lambda b, i: b.sessions.threads.archive(
            i["thread_id"], session_id=i["session_id"]
        ),
        # the environment's work queue (self-hosted workers)
        "environments.work.stats": lambda b, i: b.environments.work.stats(i["environment_id"]),
        "environments.work.list": lambda b, i: b.environments.work.list(i["environment_id"]),
        "environments.work.poll": _work_poll,
        "environments.work.retrieve": lambda b, i: b.environments.work.retrieve(
            i["work_id"], environment_id=i["environment_id"]
        ),
        "environments.work.ack": lambda b, i: b.environments.work.ack(
            i["work_id"], environment_id=i["environment_id"]
        ),
        "environments.work.heartbeat": lambda b, i: b.environments.work.heartbeat(
            i["work_id"], environment_id=i["environment_id"]
        ),
        "environments.work.update": lambda b, i: b.environments.work.update(
            i["work_id"], environment_id=i["environment_id"], metadata={"coverage": "yes"}
        ),
        "environments.work.stop": lambda b, i: b.environments.work.stop(
            i["work_id"], environment_id=i["environment_id"]
        ),
        # dreams
        "dreams.create": keep(
            "dream_id",
            lambda b, i: b.dreams.create(
                model=MODEL,
                inputs=[
                    {"type": "memory_store", "memory_store_id": i["memory_store_id"]},
                    {"type": "sessions", "session_ids": [i["session_id"]]},
                ],
            ),
        ),
        "dreams.retrieve": lambda b, i: b.dreams.retrieve(i["dream_id"]),
        "dreams.list": lambda b, i: b.dreams.list(),
        "dreams.cancel": _dream_cancel,
        "dreams.archive": lambda b, i: b.dreams.archive(i["canceled_dream_id"]),
        # deployments and their runs
        "deployments.create": keep(
            "deployment_id",
            lambda b, i: b.deployments.create(
                name="coverage",
                agent=i["agent_id"],
                environment_id=i["environment_id"],
                initial_events=[_message("Run.")],
            ),
        ),
        "deployments.retrieve": lambda b, i: b.deployments.retrieve(i["deployment_id"]),
        "deployments.update": lambda b, i: b.deployments.update(i["deployment_id"], description="c"),
        "deployments.list": lambda b, i: b.deployments.list(),
        "deployments.pause": lambda b, i: b.deployments.pause(i["deployment_id"]),
        "deployments.unpause": lambda b, i: b.deployments.unpause(i["deployment_id"]),
        "deployments.run": keep("deployment_run_id", lambda b, i: b.deployments.run(i["deployment_id"])),
        "deployment_runs.retrieve": lambda b, i: b.deployment_runs.retrieve(i["deployment_run_id"]),
        "deployment_runs.list": lambda b, i: b.deployment_runs.list(),
        "deployments.archive": lambda b, i: b.deployments.archive(i["deployment_id"]),
        # tunnels and their certificates
        "tunnels.create": keep("tunnel_id", lambda b, i: b.tunnels.create(display_name="coverage")),
        "tunnels.retrieve": lambda b, i: b.tunnels.retrieve(i["tunnel_id"]),
        "tunnels.list": lambda b, i: b.tunnels.list(),
        "tunnels.reveal_token": lambda b, i: b.tunnels.reveal_token(i["tunnel_id"]),
        "tunnels.rotate_token": lambda b, i: b.tunnels.rotate_token(i["tunnel_id"]),
        "tunnels.certificates.create": keep(
            "certificate_id",
            lambda b, i: b.tunnels.certificates.create(i["tunnel_id"], ca_certificate_pem=_ca_pem()),
        ),
        "tunnels.certificates.retrieve": lambda b, i: b.tunnels.certificates.retrieve(
            i["certificate_id"], tunnel_id=i["tunnel_id"]
        ),
        "tunnels.certificates.list": lambda b, i: b.tunnels.certificates.list(i["tunnel_id"]),
        "tunnels.certificates.archive": lambda b, i: b.tunnels.certificates.archive(
            i["certificate_id"], tunnel_id=i["tunnel_id"]
        ),
        "tunnels.archive": lambda b, i: b.tunnels.archive(i["tunnel_id"]),
        # destructive calls last (most on objects made for them)
        "sessions.resources.delete": lambda b, i: b.sessions.resources.delete(
            i["resource_id"], session_id=i["session_id"]
        ),
        "memory_stores.memories.delete": lambda b, i: b.memory_stores.memories.delete(
            i["memory_id"], memory_store_id=i["memory_store_id"]
        ),
        "skills.versions.delete": lambda b, i: b.skills.versions.delete(i["version"], skill_id=i["skill_id"]),
        "skills.delete": lambda b, i: b.skills.delete(i["skill_id"]),
        "files.delete": lambda b, i: b.files.delete(i["file_id"]),
        "vaults.credentials.archive": lambda b, i: b.vaults.credentials.archive(
            i["credential_id"], vault_id=i["vault_id"]
        ),
        "vaults.credentials.delete": lambda b, i: b.vaults.credentials.delete(
            i["credential_id"], vault_id=i["vault_id"]
        ),
        "vaults.archive": lambda b, i: b.vaults.archive(i["vault_id"]),
        "vaults.delete": _vaults_delete,
        "memory_stores.archive": lambda b, i: b.memory_stores.archive(i["memory_store_id"]),
        "memory_stores.delete": _memory_stores_delete,
        "sessions.archive": _sessions_archive,
        "sessions.delete": _sessions_delete,
        "agents.archive": lambda b, i: b.agents.archive(i["agent_id"]),
        "environments.archive": _environments_archive,
        "environments.delete": _environments_delete,
    }


async def _vaults_delete(b: Beta, ids: Ids) -> Any:
    return await b.vaults.delete(await victim(lambda: b.vaults.create(display_name="coverage-delete")))


async def _memory_stores_delete(b: Beta, ids: Ids) -> Any:
    made = await victim(lambda: b.memory_stores.create(name="coverage-delete"))
    return await b.memory_stores.delete(made)


async def _new_session(b: Beta, ids: Ids) -> str:
    return await victim(
        lambda: b.sessions.create(agent=ids["agent_id"], environment_id=ids["environment_id"])
    )


async def _sessions_archive(b: Beta, ids: Ids) -> Any:
    return await b.sessions.archive(await _new_session(b, ids))


async def _sessions_delete(b: Beta, ids: Ids) -> Any:
    return await b.sessions.delete(await _new_session(b, ids))


async def _environments_archive(b: Beta, ids: Ids) -> Any:
    env = {"type": "self_hosted"}
    return await b.environments.archive(
        await victim(lambda: b.environments.create(name="coverage-archive", config=env))
    )


async def _environments_delete(b: Beta, ids: Ids) -> Any:
    env = {"type": "self_hosted"}
    return await b.environments.delete(
        await victim(lambda: b.environments.create(name="coverage-delete", config=env))
    )


# -- discovery, checking, classifying ---------------------------------------------------------


@dataclass
class Outcome:
    method: str
    kind: str
    detail: str = ""


def discover(beta: Beta) -> tuple[list[str], list[str]]:
    """The Managed Agents API methods of the installed SDK (``sessions.events.stream`` ...), and
    the top-level resources that are neither Managed Agents nor known to be outside it.

    A method is an API call when the SDK also offers it through ``with_raw_response`` (one HTTP
    request); client-side helpers built on those (``sessions.events.tool_runner``,
    ``environments.work.poller``) are not counted."""
    methods: list[str] = []

    def walk(resource: Any, prefix: str) -> None:
        raw = {name for name in vars(resource.with_raw_response) if not name.startswith("_")}
        for attr, value in inspect.getmembers(type(resource)):
            if attr.startswith("_") or attr in ("with_raw_response", "with_streaming_response"):
                continue
            if isinstance(value, cached_property):
                child = getattr(resource, attr)
                if isinstance(child, AsyncAPIResource):
                    walk(child, f"{prefix}{attr}.")
            elif inspect.isfunction(value) and attr in raw:
                methods.append(prefix + attr)

    unclassified: list[str] = []
    for attr, value in inspect.getmembers(type(beta)):
        if attr.startswith("_") or not isinstance(value, cached_property):
            continue
        if attr in MANAGED_AGENTS:
            walk(getattr(beta, attr), attr + ".")
        elif attr not in OTHER_APIS and isinstance(getattr(beta, attr), AsyncAPIResource):
            unclassified.append(attr)
    return sorted(methods), unclassified


async def check_strictly(result: Any) -> Any:
    """What the SDK made of ``result``; raises unless the reply validates in strict mode against
    the SDK's class for it (required fields, literals, unions, nested models, datetimes as
    strings). A raw reply is validated from its JSON as the server sent it; an event read from a
    stream (the SDK keeps no raw form of one) from the JSON of what the SDK parsed."""
    value = await parse(result)
    if not isinstance(value, pydantic.BaseModel):
        return value
    if isinstance(result, AsyncAPIResponse):
        data = await result.read()
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a serializer warning: a value is not of its field's type
            data = value.model_dump_json(exclude_unset=True).encode()
    type(value).model_validate_json(data, strict=True)
    return value


def _short(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run_one(method: str, call: Call, beta: Beta, ids: Ids) -> Outcome:
    try:
        result = await check_strictly(await call(beta, ids))
    except anthropic.APIStatusError as exc:
        message = str(exc.api_message or exc.message)
        if exc.status_code >= 500:
            return Outcome(method, ERROR, f"{exc.status_code} {exc.type}: {_short(message)}")
        unrouted = exc.error_code == UNSUPPORTED_PATH or (exc.status_code == 404 and message == "Not Found")
        if exc.status_code == 404 and unrouted:
            return Outcome(method, NOT_ROUTED, _short(message))
        return Outcome(method, REFUSED, f"{exc.status_code} {exc.type}: {_short(message)}")
    except (pydantic.ValidationError, anthropic.APIResponseValidationError) as exc:
        return Outcome(method, ERROR, "the SDK's model rejects the reply: " + _short(str(exc), 300))
    except Exception as exc:  # a broken stream, a dropped connection, a bug here: all errors
        return Outcome(method, ERROR, f"{type(exc).__name__}: {_short(str(exc), 300)}")
    if result is None:
        return Outcome(method, SERVED, "no content")
    if isinstance(result, bytes):
        return Outcome(method, SERVED, f"{len(result)} bytes")
    items = getattr(result, "data", None)
    if isinstance(items, list) and "Page" in type(result).__name__:
        return Outcome(method, SERVED, f"a page of {len(items)}")
    return Outcome(method, SERVED, type(result).__name__)


async def check_all(base_url: str, api_key: str) -> tuple[list[Outcome], list[str], list[str]]:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
    async with client:
        methods, unclassified = discover(client.beta)
        plan = _plan()
        found = set(methods)
        absent = [m for m in plan if m not in found]  # planned, but this SDK has no such method
        ids, raw = Ids(), client.beta.with_raw_response
        outcomes = [await run_one(m, c, raw, ids) for m, c in plan.items() if m in found]
        outcomes += [Outcome(m, UNPLANNED, "no plausible arguments known") for m in methods if m not in plan]
    return outcomes, unclassified, absent


def report(outcomes: list[Outcome], unclassified: list[str], absent: list[str]) -> str:
    width = max(len(o.method) for o in outcomes)
    lines = [f"{'method':<{width}}  {'class':<10}  detail", "-" * (width + 60)]
    lines += [
        f"{o.method:<{width}}  {o.kind:<10}  {o.detail}" for o in sorted(outcomes, key=lambda o: o.method)
    ]
    counts = {k: sum(o.kind == k for o in outcomes) for k in (SERVED, REFUSED, NOT_ROUTED, ERROR, UNPLANNED)}
    lines.append("")
    for name in unclassified:
        lines.append(f"unclassified: client.beta.{name} is neither Managed Agents nor known to be outside it")
    for name in absent:
        lines.append(f"planned but not in this SDK: {name}")
    total = len(outcomes)
    lines.append(
        f"anthropic {anthropic.__version__}: served {counts[SERVED]} of {total} "
        f"({100 * counts[SERVED] // max(total, 1)} %) · refused {counts[REFUSED]} · "
        f"not routed {counts[NOT_ROUTED]} · error {counts[ERROR]} · unplanned {counts[UNPLANNED]}"
    )
    return "\n".join(lines)


# -- a control plane of its own -----------------------------------------------------------------


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT, env=env
    )


def _wait_for(
    pattern: str, log: Path, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 60
) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"api_coverage: {what} exited with {proc.returncode}; see {log}")
        time.sleep(0.1)
    raise SystemExit(f"api_coverage: timed out waiting for {what}; see {log}")


@contextmanager
def own_control_plane() -> Iterator[tuple[str, str]]:
    """``outpost-control serve`` on 127.0.0.1 in a temporary directory, its model the local
    scripted server (``echo``); yields the API's URL and the admin key."""
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="outpost-coverage-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "ANTHROPIC_API_KEY": "local-scripted-model"}
        env.pop("ANTHROPIC_BASE_URL", None)
        try:
            model_log = work / "model.log"
            procs.append(_start(["-m", "scripted_model.local_server", "--script", "echo"], model_log, env))
            model_url = _wait_for(r"(http://127\.0\.0\.1:\d+)", model_log, procs[-1], "the model server")
            cp_log = work / "control-plane.log"
            local = "127.0.0.1:0"
            serve = ["serve", "--data-dir", str(work / "cp"), "--http", local, "--tunnel", local]
            procs.append(
                _start(["-m", "control_plane.cli", *serve, "--model-base-url", model_url], cp_log, env)
            )
            url = _wait_for(r"API (\S+?), tunnel", cp_log, procs[-1], "the control plane")
            yield url, (work / "cp" / "admin-api-key").read_text().strip()
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base-url", help="a running control plane (default: start one here)")
    parser.add_argument("--api-key-file", type=Path, help="a file holding an admin API key for --base-url")
    args = parser.parse_args(argv)
    if (args.base_url is None) != (args.api_key_file is None):
        parser.error("--base-url and --api-key-file go together")
    if args.base_url is not None:
        key = args.api_key_file.read_text(encoding="utf-8").strip()
        outcomes, unclassified, absent = asyncio.run(check_all(args.base_url, key))
    else:
        with own_control_plane() as (url, key):
            outcomes, unclassified, absent = asyncio.run(check_all(url, key))
    print(report(outcomes, unclassified, absent))
    return 1 if any(o.kind == ERROR for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
