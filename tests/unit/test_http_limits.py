"""``control_plane.http_limits``: the protocol factory and the open-file limit."""

from __future__ import annotations

import resource

import pytest

from control_plane.http_limits import h11_protocol, raise_open_file_limit


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
