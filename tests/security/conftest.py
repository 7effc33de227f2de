"""The reliability suites' shared fixtures (`tests/chaos/conftest.py`): the keyed fake model,
the chaos Telegram fake, short adapter timings, and the secret scan of every test's logs."""

from tests.chaos.conftest import (  # noqa: F401 (fixtures)
    fast_telegram,
    llm,
    logs_without_secrets,
    tg,
)
