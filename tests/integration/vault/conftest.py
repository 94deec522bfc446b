"""The vault API tests' fixture: the real API with a vault (see ``vault_app``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.vault_app import VaultApi, running_vault_api


@pytest.fixture
async def vault_api(tmp_path: Path) -> AsyncIterator[VaultApi]:
    async with running_vault_api(tmp_path) as api:
        yield api
