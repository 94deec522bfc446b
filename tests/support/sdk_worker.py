"""The SDK's own ``EnvironmentWorker`` in a process of its own (to kill -9 it):
``python -m tests.support.sdk_worker BASE_URL ENVIRONMENT_ID WORKDIR``, the environment key in
``OUTPOST_TEST_ENVIRONMENT_KEY`` (never in argv)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import anthropic


async def main(base_url: str, environment_id: str, workdir: str) -> None:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="unused-by-the-worker", max_retries=0)
    key = os.environ.pop("OUTPOST_TEST_ENVIRONMENT_KEY")
    worker = client.beta.environments.work.worker(
        environment_id=environment_id, environment_key=key, workdir=workdir, memory_sync_interval=None
    )
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
