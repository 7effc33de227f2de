"""The end-to-end suites' shared fixture: a gateway process on the fake model, not yet started
(a test may still change its config), killed afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.redis_server import RedisProcess


@pytest.fixture
def gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path / "home",
        {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}},
    )
    yield gw
    gw.kill()


@pytest.fixture
def redis() -> Iterator[RedisProcess]:
    """A Redis server of the test's own, on a Unix socket (the cluster's end-to-end tests)."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-redis-", dir="/tmp"))  # short socket path
    server = RedisProcess(directory)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)
