"""Several control-plane addresses: the dialer moves on when one fails or drains."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from edge_agent.config import ConnectionConfig, EdgeConfig
from edge_agent.connection.dialer import Dialer, Endpoint, _Target, first_endpoint
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


def _fleet_dialer(tmp_path: Path, edge_id: str, order: str = "spread") -> Dialer:
    addresses = [{"tunnel_address": f"127.0.0.1:{1001 + i}"} for i in range(3)]
    config = EdgeConfig.model_validate(
        {
            "state_dir": str(tmp_path),
            "control_plane": {"addresses": addresses, "address_order": order},
            "connection": {"transport": "grpc"},
        }
    )
    identity = cast(Identity, SimpleNamespace(edge_id=edge_id))
    return Dialer.for_config(config, identity, max_frame_bytes=1 << 20, env={}, remember=False)


def test_a_fleet_spreads_over_the_addresses_and_each_edge_keeps_its_start(tmp_path: Path) -> None:
    starts = Counter(_fleet_dialer(tmp_path, f"edge_{i:04d}").endpoint_index for i in range(300))
    assert sorted(starts) == [0, 1, 2]
    assert all(70 <= n <= 130 for n in starts.values()), starts  # about 100 each
    assert _fleet_dialer(tmp_path, "edge_0042").endpoint_index == first_endpoint("edge_0042", 3)
    assert {_fleet_dialer(tmp_path, "edge_0042").endpoint_index for _ in range(5)} == {
        first_endpoint("edge_0042", 3)
    }  # stable: a restarted edge goes back to the same address first


async def test_after_its_start_an_edge_fails_over_in_list_order(tmp_path: Path) -> None:
    edge_id = next(f"edge_{i}" for i in range(100) if first_endpoint(f"edge_{i}", 3) == 2)
    dialer = _fleet_dialer(tmp_path, edge_id)
    tried: list[str | None] = []

    async def fake(target: _Target) -> Transport:
        tried.append(target.tunnel_address)
        if target.tunnel_address != "127.0.0.1:1002":
            raise TransportError("refused")
        return cast(Transport, object())

    dialer._connect_target = fake  # type: ignore[method-assign]
    await dialer.connect()
    assert tried == ["127.0.0.1:1003", "127.0.0.1:1001", "127.0.0.1:1002"]
    assert dialer.endpoint_index == 1


def test_in_order_starts_at_the_first_address(tmp_path: Path) -> None:
    assert {_fleet_dialer(tmp_path, f"edge_{i}", "in_order").endpoint_index for i in range(20)} == {0}
    assert first_endpoint("edge_1", 1) == 0
