"""``control_plane.http_limits``: the protocol factories and the open-file limit; ``serve``'s event loop."""

from __future__ import annotations

import resource

import pytest

from control_plane.cli_serve import event_loop_factory
from control_plane.http_limits import h11_protocol, http_protocol, httptools_protocol, raise_open_file_limit


def test_h11_protocol_carries_its_deadline() -> None:
    protocol = h11_protocol(2.5)
    assert getattr(protocol, "header_timeout_s") == 2.5  # noqa: B009
    with pytest.raises(ValueError, match="positive"):
        h11_protocol(0)


def test_open_file_limit_is_raised_never_lowered() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_file_limit(1) == soft  # never lowered
    got = raise_open_file_limit(soft + 1)
    assert got == (soft + 1 if hard == resource.RLIM_INFINITY or soft < hard else soft)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == got


def test_httptools_protocol_carries_its_deadline_and_is_preferred() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    protocol = httptools_protocol(3.0)
    assert issubclass(protocol, HttpToolsProtocol)
    assert getattr(protocol, "header_timeout_s") == 3.0  # noqa: B009
    assert issubclass(http_protocol(3.0), HttpToolsProtocol)  # httptools is installed here
    with pytest.raises(ValueError, match="positive"):
        httptools_protocol(-1)


def test_serve_runs_on_uvloop_unless_told_otherwise() -> None:
    import uvloop

    assert event_loop_factory("auto") is uvloop.new_event_loop
    assert event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("asyncio") is None
