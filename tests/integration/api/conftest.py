"""The real API in a real uvicorn server on 127.0.0.1 (port 0) over a real SqliteStore in tmp_path,
driven by the official ``anthropic`` SDK. The harness is replaced by a :class:`FakeRunner`, which
records the calls the API makes into it (:mod:`tests.support.api_server`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.api_app import Api
from tests.support.api_server import serve_api


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with serve_api(tmp_path) as served:
        yield served
