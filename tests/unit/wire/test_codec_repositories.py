"""Provision.repositories on the wire: round trips, validation both ways, old bytes unchanged, and
the token kept out of reprs."""

from __future__ import annotations

import pytest

from outpost_wire import (
    ErrorCode,
    Execute,
    Failure,
    MalformedFrame,
    Provision,
    Repository,
    Request,
    decode_frame,
    decode_outcome,
    encode_frame,
    encode_outcome,
)
from outpost_wire._proto import tunnel_pb2 as pb

LIMIT = 4 * 1024 * 1024
TOKEN = "canary-wire-token-5d2b"
REPO = Repository("sesrsc_1", "https://git.internal:8443/org/app.git", "/workspace/app", token=TOKEN)
BRANCH = Repository("sesrsc_2", "https://example.com/b.git", "/workspace/b", "branch", "feature/x")
COMMIT = Repository("sesrsc_3", "https://example.com/c.git", "/workspace/c", "commit", "a" * 40)


@pytest.mark.parametrize(
    "op",
    [
        Provision(repositories=(REPO,)),
        Provision("img", 1.0, 2**30, 64, repositories=(REPO, BRANCH, COMMIT)),
        Execute("bash", "{}", 1000, sandbox=Provision(repositories=(BRANCH,))),
        Provision(repositories=tuple(Repository(f"r{i}", "u", f"/w/{i}") for i in range(16))),
    ],
    ids=["one", "three", "execute", "sixteen"],
)
def test_round_trip(op: Provision | Execute) -> None:
    frame = Request("r", "s", "k", 0, op)
    assert decode_frame(encode_frame(frame, LIMIT), LIMIT) == frame


def test_no_repositories_is_the_old_encoding() -> None:
    frame = Request("r", "s", "k", 0, Provision("python:3.12"))
    message = pb.Frame(
        request=pb.Request(
            request_id="r", session_id="s", idempotency_key="k", provision=pb.Provision(image="python:3.12")
        )
    )
    assert encode_frame(frame, LIMIT) == message.SerializeToString()


def test_the_token_is_not_in_reprs() -> None:
    frame = Request("r", "s", "k", 0, Provision(repositories=(REPO,)))
    assert TOKEN not in repr(frame) and TOKEN not in str(frame)
    assert "sesrsc_1" in repr(frame) and REPO.token == TOKEN


@pytest.mark.parametrize(
    "repo",
    [
        Repository("", "https://h/a", "/workspace/a"),
        Repository("r", "", "/workspace/a"),
        Repository("r", "https://h/a", "workspace/a"),
        Repository("r", "https://h/a", ""),
        Repository("r", "https://h/a", "/workspace/a", "tag", "v1"),
        Repository("r", "https://h/a", "/workspace/a", "branch", ""),
        Repository("r", "https://h/a", "/workspace/a", "", "main"),
        Repository("r", "https://h/" + "a" * 2048, "/workspace/a"),
        Repository("r", "https://h/a", "/workspace/a", token=b"bytes"),  # type: ignore[arg-type]
    ],
)
def test_encode_refuses_bad_repositories_without_showing_the_token(repo: Repository) -> None:
    with pytest.raises(MalformedFrame) as info:
        encode_frame(Request("r", "s", "k", 0, Provision(repositories=(repo,))), LIMIT)
    assert TOKEN not in str(info.value)


def test_limits_and_types() -> None:
    seventeen = tuple(Repository(f"r{i}", "u", f"/w/{i}") for i in range(17))
    with pytest.raises(MalformedFrame, match="more than 16"):
        encode_frame(Request("r", "s", "k", 0, Provision(repositories=seventeen)), LIMIT)
    with pytest.raises(MalformedFrame, match="a tuple"):
        encode_frame(Request("r", "s", "k", 0, Provision(repositories=[REPO])), LIMIT)  # type: ignore[arg-type]


def test_decode_refuses_bad_repositories() -> None:
    message = pb.Frame(
        request=pb.Request(
            request_id="r",
            provision=pb.Provision(repositories=[pb.Repository(id="x", url="u", mount_path="rel")]),
        )
    )
    with pytest.raises(MalformedFrame, match="mount_path"):
        decode_frame(message.SerializeToString(), LIMIT)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.REPOSITORY_CLONE_FAILED,
        ErrorCode.REPOSITORY_AUTHENTICATION_FAILED,
        ErrorCode.REPOSITORY_FORBIDDEN,
        ErrorCode.REPOSITORY_NOT_FOUND,
        ErrorCode.REPOSITORY_CHECKOUT_FAILED,
    ],
)
def test_repository_failures_round_trip(code: ErrorCode) -> None:
    failure = Failure(code, "repository https://h/a.git: no")
    assert decode_outcome(encode_outcome(failure)) == failure
