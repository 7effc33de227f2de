"""`hermes dashboard`: a one-time login link (got with the control token, configured or the
gateway's file), whether the gateway answers there, and a browser only on a desktop."""

from __future__ import annotations

import asyncio
import io
import re
import sys
from pathlib import Path
from unittest import mock

import pytest

from hermes_gateway.config import desktop_display
from hermes_gateway.dashboard import cli
from hermes_gateway.dashboard.auth import COOKIE
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway


async def test_it_prints_a_login_link_and_opens_it_only_on_a_desktop(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    token = "t" * 8 + "0123456789"
    config = make_config(tmp_path, fake_llm.base_url, control={"token": token})
    async with running_gateway(config) as (gw, _client):
        url = f"http://127.0.0.1:{gw.control.port}"
        out = io.StringIO()
        with (
            mock.patch.object(cli, "desktop_display", return_value=True),
            mock.patch.object(cli.webbrowser, "open") as opened,
        ):
            code = await asyncio.to_thread(
                cli.run_dashboard, url, config, token, opener="x", out=out
            )
        assert code == 0
        link, note = out.getvalue().splitlines()
        assert re.fullmatch(rf"{url}/dashboard/login\?once=[\w-]{{43}}", link), link
        assert note == "(a one-time login link: it works once, within 10 minutes)"
        opened.assert_called_once_with(link)
        with (
            mock.patch.object(cli, "desktop_display", return_value=False),
            mock.patch.object(cli.webbrowser, "open") as opened,
        ):
            await asyncio.to_thread(cli.run_dashboard, url, config, token, opener="x", out=out)
        opened.assert_not_called()
        out = io.StringIO()  # a token the gateway does not take: the form, and where the token is
        await asyncio.to_thread(cli.run_dashboard, url, config, "wrong", opener=None, out=out)
        assert out.getvalue().splitlines() == [
            f"{url}/dashboard/",
            "log in with the control token (control.token in the config)",
        ]


async def test_hermes_dashboard_link_logs_in_once_with_only_the_token_file(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """No control.token configured: `hermes dashboard` reads the gateway's file, and its link
    gives a browser a session once; opened again it gives nothing."""
    config = make_config(tmp_path, fake_llm.base_url)
    cfg = str(tmp_path / "config.yaml")
    async with running_gateway(config) as (gw, client):
        argv = ["dashboard", "--config", cfg, "--url", client.base, "--no-open"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hermes_gateway", *argv, stdout=asyncio.subprocess.PIPE
        )
        printed, _ = await proc.communicate()
        assert proc.returncode == 0
        link = printed.decode().splitlines()[0]
        assert link.startswith(f"{client.base}/dashboard/login?once=")
        async with client.http.get(link, allow_redirects=False) as resp:
            assert resp.status == 303 and resp.headers["Location"] == "/dashboard/"
            cookie = {"Cookie": f"{COOKIE}={resp.cookies[COOKIE].value}"}
        async with client.http.get(f"{client.base}/dashboard/pairing", headers=cookie) as page:
            assert page.status == 200 and "Pairing" in await page.text()
        async with client.http.get(link, allow_redirects=False) as again:
            assert again.status == 401 and COOKIE not in again.cookies
            assert "used or has expired" in await again.text()
        async with client.http.get(f"{client.base}/dashboard/pairing", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/dashboard/login"


def test_a_gateway_that_does_not_answer_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(tmp_path, None, control={"port": 1})
    out = io.StringIO()
    assert cli.run_dashboard("http://127.0.0.1:1", config, None, opener=None, out=out) == 1
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
