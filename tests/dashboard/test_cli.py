"""`hermes dashboard`: the URL, whether the gateway answers there, and a browser only on a
desktop."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from unittest import mock

import pytest

from hermes_gateway.config import desktop_display
from hermes_gateway.dashboard import cli
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway


async def test_it_prints_the_url_and_opens_it_only_on_a_desktop(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, control={"token": "t" * 8 + "0123456789"})
    async with running_gateway(config) as (gw, _client):
        url = f"http://127.0.0.1:{gw.control.port}"
        out = io.StringIO()
        with (
            mock.patch.object(cli, "desktop_display", return_value=True),
            mock.patch.object(cli.webbrowser, "open") as opened,
        ):
            code = await asyncio.to_thread(cli.run_dashboard, url, config, opener="x", out=out)
        assert code == 0
        assert out.getvalue().splitlines() == [
            f"{url}/dashboard/",
            "log in with the control token (control.token in the config)",
        ]
        opened.assert_called_once_with(f"{url}/dashboard/")
        with (
            mock.patch.object(cli, "desktop_display", return_value=False),
            mock.patch.object(cli.webbrowser, "open") as opened,
        ):
            await asyncio.to_thread(cli.run_dashboard, url, config, opener="x", out=out)
        opened.assert_not_called()


def test_a_gateway_that_does_not_answer_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(tmp_path, None, control={"port": 1})
    out = io.StringIO()
    assert cli.run_dashboard("http://127.0.0.1:1", config, opener=None, out=out) == 1
    assert out.getvalue() == "http://127.0.0.1:1/dashboard/\n"
    assert "not answering" in capsys.readouterr().err


def test_a_desktop_is_a_display() -> None:
    assert desktop_display({"DISPLAY": ":0"}) and desktop_display({"WAYLAND_DISPLAY": "w-0"})
    assert not desktop_display({})


def test_the_command_is_wired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hermes_gateway.cli.main import main

    config = make_config(tmp_path, None, control={"port": 1})
    assert main(["dashboard", "--config", str(tmp_path / "config.yaml"), "--no-open"]) == 1
    out = capsys.readouterr()
    assert out.out == f"http://127.0.0.1:{config.control.port}/dashboard/\n"
    assert "not answering" in out.err
