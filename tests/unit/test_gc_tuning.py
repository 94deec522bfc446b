"""``gc_thresholds``: what ``serve`` does to the garbage collector once it is up."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from control_plane.config import ControlPlaneConfig
from control_plane.gc_tuning import tune_for_serving


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_freezes_what_is_alive_then_sets_the_thresholds(restored_gc: None) -> None:
    survivor = {"kept": ["alive"]}
    tune_for_serving((50_000, 20, 100))
    assert gc.get_threshold() == (50_000, 20, 100)
    assert gc.get_freeze_count() > 0
    assert survivor["kept"] == ["alive"]


def test_none_keeps_pythons_thresholds(restored_gc: None) -> None:
    before = gc.get_threshold()
    tune_for_serving(None)
    assert gc.get_threshold() == before


def test_config_default_and_validation() -> None:
    assert ControlPlaneConfig().gc_thresholds == (50_000, 20, 100)
    assert ControlPlaneConfig.model_validate({"gc_thresholds": None}).gc_thresholds is None
    chosen = ControlPlaneConfig.model_validate({"gc_thresholds": [1000, 10, 10]})
    assert chosen.gc_thresholds == (1000, 10, 10)
    for bad in ([0, 10, 10], [1000, 10], "fast"):
        with pytest.raises(ValidationError):
            ControlPlaneConfig.model_validate({"gc_thresholds": bad})
