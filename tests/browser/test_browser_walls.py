"""Chromium runs inside the tool walls: the gateway's home is out of its sight, it has no
capabilities and cannot gain any, and its writes are confined (Landlock) to a folder of its
own and a private /tmp."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hermes_gateway.browser.pool import BrowserPool
from tests.browser.conftest import needs_chromium, settings
from tests.browser.site import Site
from tools import sandbox
from tools.host import BrowserRequest

pytestmark = [needs_chromium]


@pytest.fixture
def hidden_home(tmp_path: Path) -> Iterator[Path]:
    """A gateway home set up as the gateway does: hidden from every tool process."""
    if sandbox.current_mode() != "namespace":
        pytest.skip("only a namespace can hide files")
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_text("the store")
    sandbox.setup([home])
    yield home
    sandbox.setup([])  # hide nothing again in this test process


def chromium_main(pool: BrowserPool) -> psutil.Process:
    """The browser process (not a renderer or helper) started for ``pool``."""
    for proc in psutil.Process().children(recursive=True):
        cmdline = proc.cmdline()
        args = " ".join(cmdline)
        name = os.path.basename(cmdline[0]) if cmdline else ""
        if (
            name.startswith("chromium")
            and "--remote-debugging-pipe" in args
            and "--type=" not in args
        ):
            return proc
    raise AssertionError("no Chromium process found")


def test_chromium_runs_inside_the_tool_walls(hidden_home: Path, site: Site) -> None:
    pool = BrowserPool(settings())
    try:
        request = BrowserRequest("walled", "navigate", url=site.url)
        assert "Home" in pool.browse(request, lambda: False).text
        assert pool.walled
        pid = chromium_main(pool).pid
        assert (hidden_home / "state.db").exists()  # here it is
        assert not Path(f"/proc/{pid}/root{hidden_home}/state.db").exists()  # there it is not
        status = Path(f"/proc/{pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status
        assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status
    finally:
        pool.close()
