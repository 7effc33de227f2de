"""Fixtures of the browser tests: the served site, the secret server it must not reach, and a
browser pool whose guard lets 127.0.0.1 (the site) through and nothing else private."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_gateway.browser.pool import BrowserPool
from tests.browser.site import Site, secret_server
from tools.builtin import BrowserToolConfig

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def secret() -> Iterator[tuple[str, list[str]]]:
    with secret_server() as found:
        yield found


@pytest.fixture(scope="module")
def site(secret: tuple[str, list[str]]) -> Iterator[Site]:
    with Site(secret[0]) as served:
        assert isinstance(served, Site)
        yield served


def settings(**extra: object) -> BrowserToolConfig:
    values: dict[str, object] = {
        "executable": CHROMIUM,
        "timeout_s": 30,
        "allowed_networks": ("127.0.0.1/32",),
    }
    return BrowserToolConfig.model_validate({**values, **extra})


@pytest.fixture(scope="module")
def pool() -> Iterator[BrowserPool]:
    browsers = BrowserPool(settings())
    yield browsers
    browsers.close()
