"""Fixtures shared by the reliability suites (chaos, security, soak): the fake model that
wants `keys.MODEL_KEY`, the chaos Telegram fake, short adapter timings, and every in-process
test's logs routed through the daemon's redacting pipeline and scanned for the test secrets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from tests.chaos.kit import ChaosTelegram, fake_llm_with_key, real_logging, secrets_config
from tests.fakes.openai import FakeOpenAI
from tests.security import keys


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with fake_llm_with_key() as fake:
        yield fake


@pytest.fixture
def tg() -> Iterator[ChaosTelegram]:
    fake = ChaosTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fast_telegram(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short long polls and retries for an in-process Telegram adapter."""
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "retry_first", 0.1)
    monkeypatch.setattr(TelegramAdapter, "lock_retry", 0.1)
    monkeypatch.setattr(TelegramAdapter, "typing_interval", 0.2)


@pytest.fixture(autouse=True)
def logs_without_secrets(tmp_path: Path) -> Iterator[None]:
    with real_logging(
        secrets_config(tmp_path / "test-logs", os.environ.get("HERMES_TEST_LOG_LEVEL", "info"))
    ) as files:
        yield
    keys.assert_no_leaks(files())
