"""`/metrics` of the real process: model calls (latency, outcome, errors, tokens) and the
process's own figures (RSS, CPU, fds), as an operator's Prometheus scrapes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, error, text

pytestmark = pytest.mark.e2e


@pytest.fixture
def gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path / "home",
        {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}},
    )
    yield gw
    gw.kill()


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = httpx.get(f"{url}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def test_model_calls_tokens_errors_and_the_process_are_measured(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("hi", usage={"prompt_tokens": 120, "completion_tokens": 7}))
    fake_llm.push(error(503))
    gateway.start()
    assert gateway.chat("one", user="a").status_code == 200
    gateway.chat("two", user="b")
    m = _samples(gateway.url)
    assert m[("hermes_model_call_duration_seconds_count", (("outcome", "ok"),))] == 1
    assert m[("hermes_model_call_duration_seconds_count", (("outcome", "error"),))] == 1
    assert m[("hermes_model_errors_total", (("status", "503"),))] == 1
    assert m[("hermes_model_tokens_total", (("kind", "prompt"),))] == 120
    assert m[("hermes_model_tokens_total", (("kind", "completion"),))] == 7
    assert m[("process_resident_memory_bytes", ())] > 10_000_000
    assert m[("process_open_fds", ())] > 0
