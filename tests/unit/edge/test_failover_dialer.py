"""Several control-plane addresses: the dialer moves on when one fails or drains."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from edge_agent.config import ConnectionConfig, EdgeConfig
from edge_agent.connection.dialer import Dialer, Endpoint, _Target
from edge_agent.connection.transport import Transport, TransportError
from edge_agent.identity import Identity


def _dialer(tmp_path: Path, *, more: int = 1, clock: list[float] | None = None) -> Dialer:
    now = clock if clock is not None else [0.0]
    return Dialer(
        identity=cast(Identity, object()),
        config=ConnectionConfig(transport="grpc"),
        tunnel_address="127.0.0.1:1001",
        control_plane_url=None,
        more_endpoints=[Endpoint(f"127.0.0.1:{1002 + i}", None) for i in range(more)],
        state_dir=tmp_path,
        max_frame_bytes=1 << 20,
        env={},
        drain_memory_s=30.0,
        monotonic=lambda: now[0],
    )


async def test_connect_moves_on_to_the_next_address_and_keeps_it(tmp_path: Path) -> None:
    dialer = _dialer(tmp_path)
    tried: list[str | None] = []
    down = {"127.0.0.1:1001"}

    async def fake(target: _Target) -> Transport:
        tried.append(target.tunnel_address)
        if target.tunnel_address in down:
            raise TransportError("refused")
        return cast(Transport, object())

    dialer._connect_target = fake  # type: ignore[method-assign]
    await dialer.connect()
    assert tried == ["127.0.0.1:1001", "127.0.0.1:1002"] and dialer.endpoint_index == 1
    down.add("127.0.0.1:1002")
    with pytest.raises(TransportError, match="no control-plane address"):
        await dialer.connect()


def test_rotate_after_a_drain_wraps_around(tmp_path: Path) -> None:
    dialer = _dialer(tmp_path)
    dialer.rotate()
    assert dialer.endpoint_index == 1
    dialer.rotate()
    assert dialer.endpoint_index == 0


def test_rotate_says_whether_to_dial_the_next_address_at_once(tmp_path: Path) -> None:
    clock = [100.0]
    dialer = _dialer(tmp_path, more=2, clock=clock)  # three addresses
    assert dialer.rotate() is True and dialer.endpoint_index == 1  # address 1 drained: 2 is fresh
    assert dialer.rotate() is True and dialer.endpoint_index == 2
    # Every address drained this edge within drain_memory_s: back off rather than hop in a loop.
    assert dialer.rotate() is False and dialer.endpoint_index == 0
    clock[0] += 31.0  # long ago now: address 2 (which drained at 100) is worth a try at once again
    assert dialer.rotate() is True and dialer.endpoint_index == 1


def test_rotate_with_a_single_address_never_dials_at_once(tmp_path: Path) -> None:
    dialer = Dialer(
        identity=cast(Identity, object()),
        config=ConnectionConfig(transport="grpc"),
        tunnel_address="127.0.0.1:1001",
        control_plane_url=None,
        state_dir=tmp_path,
        max_frame_bytes=1 << 20,
        env={},
    )
    assert dialer.rotate() is False and dialer.endpoint_index == 0


def test_addresses_config() -> None:
    cfg: dict[str, Any] = {"addresses": [{"tunnel_address": "a:1"}, {"url": "https://b"}]}
    assert len(EdgeConfig.model_validate({"control_plane": cfg}).control_plane.addresses) == 2
    with pytest.raises(ValueError, match="either"):
        EdgeConfig.model_validate({"control_plane": {**cfg, "tunnel_address": "c:1"}})
    with pytest.raises(ValueError, match="needs tunnel_address"):
        EdgeConfig.model_validate({"control_plane": {"addresses": [{}]}})
