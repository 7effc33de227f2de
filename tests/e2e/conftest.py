"""The end-to-end suites' shared fixture: a gateway process on the fake model, not yet started
(a test may still change its config), killed afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI


@pytest.fixture
def gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path / "home",
        {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}},
    )
    yield gw
    gw.kill()
