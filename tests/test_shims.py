"""Each shim over a third-party internal, exercised against the installed library: after an
upgrade, a failure here names the library, its version and the shim that needs a look."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import inspect
import json
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web


def broken(distribution: str, shim: str, what: str) -> str:
    version = importlib.metadata.version(distribution)
    return (
        f"{distribution} {version} broke {shim}: {what}. Fix the shim for this version, or keep "
        f"the upper bound on {distribution} in pyproject.toml below {version}."
    )


async def until(check: Callable[[], bool], what: str, limit_s: float = 5.0) -> None:
    """Poll ``check`` (the loop does the I/O meanwhile); a generous limit, not a timing test."""
    for _ in range(int(limit_s / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


# python-telegram-bot: adapters/shims/ptb.py


def test_ptb_retry_after_reads_the_field_without_a_warning() -> None:
    from telegram.error import RetryAfter

    from adapters.shims.ptb import retry_after_s

    shim = "adapters/shims/ptb.py"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB itself warns while building the error
        exc = RetryAfter(7)
    if not hasattr(exc, "_retry_after"):
        pytest.fail(broken("python-telegram-bot", shim, "RetryAfter._retry_after is gone"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        seconds = retry_after_s(exc)
    assert seconds == 7.0, broken("python-telegram-bot", shim, f"read {seconds!r} for 7 s")
    assert seen == [], broken("python-telegram-bot", shim, f"it warns: {seen[0].message}")


def test_ptb_not_given_marker_is_reachable_publicly() -> None:
    from telegram.request import BaseRequest

    from adapters.telegram.http import _given

    assert _given(BaseRequest.DEFAULT_NONE, 5.0) == 5.0, broken(
        "python-telegram-bot",
        "adapters/telegram/http.py",
        "BaseRequest.DEFAULT_NONE is no longer PTB's not-given marker class",
    )
    assert _given(None, 5.0) is None
    assert _given(2, 5.0) == 2.0


# Slack (slack-bolt, slack-sdk): adapters/shims/slack.py


def _auth_response(client: Any) -> Any:
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    data = {"ok": True, "user_id": "UBOT", "bot_id": "BBOT", "team_id": "T1", "user": "hermes"}
    return AsyncSlackResponse(
        client=client,
        http_verb="POST",
        api_url="http://127.0.0.1:9/api/auth.test",
        req_args={},
        data=data,
        headers={},
        status_code=200,
    )


async def test_slack_auth_seed_spares_bolt_its_own_auth_test() -> None:
    """Bolt's client points at a closed port: an event reaches the listener only if bolt used
    the `auth.test` answer we seeded instead of calling `auth.test` itself."""
    from slack_bolt.app.async_app import AsyncApp
    from slack_bolt.request.async_request import AsyncBoltRequest
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.shims.slack import seed_auth_test

    shim = "adapters/shims/slack.py"
    client = AsyncWebClient(token="xoxb-test", base_url="http://127.0.0.1:9/api/", timeout=2)
    app = AsyncApp(client=client, process_before_response=True, request_verification_enabled=False)
    heard: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        heard.append(event["text"])

    if not seed_auth_test(app, _auth_response(client)):
        pytest.fail(broken("slack_bolt", shim, "no single-team authorization middleware found"))
    body = {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": "Ev1",
        "event": {"type": "message", "user": "U1", "channel": "C1", "text": "hi", "ts": "1.0"},
    }
    response = await app.async_dispatch(AsyncBoltRequest(mode="socket_mode", body=body))
    assert response.status == 200, broken("slack_bolt", shim, f"dispatch -> {response.status}")
    assert heard == ["hi"], broken("slack_bolt", shim, "bolt ignored the seeded auth.test")


async def test_slack_socket_connects_to_the_url_we_set() -> None:
    """`connect()` must use the URL we opened ourselves, never open one of its own."""
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.shims.slack import use_socket_url

    shim = "adapters/shims/slack.py"
    connected: list[str] = []

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connected.append(request.path_qs)
        async for _ in ws:
            pass
        return ws

    class Client(SocketModeClient):
        async def issue_new_wss_url(self, *args: Any, **kwargs: Any) -> str:
            pytest.fail(broken("slack_sdk", shim, "connect() ignored the preset wss_uri"))

    app = web.Application()
    app.router.add_get("/link", socket)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    web_client = AsyncWebClient(base_url="http://127.0.0.1:9/api/")
    client = Client(app_token="xapp-test", web_client=web_client, auto_reconnect_enabled=False)
    try:
        use_socket_url(client, f"ws://127.0.0.1:{port}/link?ticket=ours")
        await asyncio.wait_for(client.connect(), 10)
        await until(lambda: bool(connected), "the Socket Mode connection")
        assert connected == ["/link?ticket=ours"]
    finally:
        await client.close()
        await runner.cleanup()


# discord.py: adapters/shims/discordpy.py


def test_discord_endpoints_reach_its_routes_and_gateway() -> None:
    import discord.gateway
    import discord.http
    import yarl

    from adapters.shims.discordpy import point_at, restore

    shim = "adapters/shims/discordpy.py"
    saved = point_at("http://127.0.0.1:9/api/v10/", "ws://127.0.0.1:9/gateway")
    try:
        url = discord.http.Route("GET", "/users/@me").url
        assert url == "http://127.0.0.1:9/api/v10/users/@me", broken(
            "discord.py", shim, f"Route.BASE no longer builds request URLs ({url})"
        )
        gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
        assert gateway == yarl.URL("ws://127.0.0.1:9/gateway"), broken(
            "discord.py", shim, "DiscordWebSocket.DEFAULT_GATEWAY is gone"
        )
    finally:
        restore(saved)
    assert saved[0] == discord.http.Route.BASE
    assert saved[1] == discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


async def test_discord_gateway_reads_the_parser_table_we_wrap() -> None:
    """The table the shim hands out is the one the gateway websocket dispatches through."""
    import discord
    import discord.gateway

    from adapters.shims.discordpy import gateway_parsers

    shim = "adapters/shims/discordpy.py"
    client = discord.Client(intents=discord.Intents.none())
    try:
        parsers = gateway_parsers(client)
    except AttributeError as exc:
        pytest.fail(broken("discord.py", shim, f"Client._connection.parsers is gone ({exc})"))
    if "MESSAGE_CREATE" not in parsers or not all(map(callable, parsers.values())):
        pytest.fail(broken("discord.py", shim, "the parser table has another shape"))
    wiring = inspect.getsource(discord.gateway.DiscordWebSocket.from_client)
    if "_discord_parsers = client._connection.parsers" not in wiring:
        pytest.fail(broken("discord.py", shim, "the websocket takes its parsers elsewhere"))
    seen: list[Any] = []
    parsers["MESSAGE_CREATE"] = seen.append
    ws = discord.gateway.DiscordWebSocket(socket=None, loop=asyncio.get_running_loop())
    ws._discord_parsers = client._connection.parsers
    ws._dispatch = lambda *args: None
    ws.sequence, ws.session_id, ws.shard_id = 0, "s", None
    payload = json.dumps({"op": 0, "t": "MESSAGE_CREATE", "s": 1, "d": {"id": "1"}})
    try:
        await ws.received_message(payload)
    except Exception as exc:
        pytest.fail(broken("discord.py", shim, f"the gateway's dispatch changed ({exc!r})"))
    assert seen == [{"id": "1"}], broken("discord.py", shim, "the gateway bypassed the table")
    await client.close()


# aiohttp: hermes_gateway/control/aiohttp_shim.py


@contextlib.asynccontextmanager
async def probe(app: web.Application) -> AsyncIterator[tuple[list[Any], int]]:
    """``app`` served through the shim's hooks; yields (the handlers made, the port)."""
    from hermes_gateway.control.aiohttp_shim import (
        HandlerBase,
        RunnerBase,
        ServerBase,
        server_kwargs,
    )

    made: list[HandlerBase] = []

    class Server(ServerBase):
        def __call__(self) -> HandlerBase:
            handler = HandlerBase(self, **self.handler_kwargs())
            made.append(handler)
            return handler

    class Runner(RunnerBase):
        def wrap_server(self, base: web.Server) -> web.Server:
            shim = "hermes_gateway/control/aiohttp_shim.py"
            try:
                kw = server_kwargs(base)
                server = Server(base.request_handler, loop=asyncio.get_running_loop(), **kw)
                server.handler_kwargs()
            except AttributeError as exc:
                pytest.fail(broken("aiohttp", shim, f"a server internal is gone ({exc!r})"))
            assert kw.get("keepalive_timeout") == 9.0, broken("aiohttp", shim, f"settings: {kw}")
            return server

    runner = Runner(app, keepalive_timeout=9.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield made, runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_aiohttp_handler_state_follows_a_request_head() -> None:
    shim = "hermes_gateway/control/aiohttp_shim.py"
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/slow", slow)
    async with probe(app) as (made, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
            await until(lambda: bool(made), "the connection handler")
            handler = made[0]
            try:
                assert handler.open_connections() == 1
                assert handler.event_loop() is asyncio.get_running_loop()
                assert handler.head_pending(), broken("aiohttp", shim, "a half-read head")
                writer.write(b"\r\n")
                await until(lambda: not handler.head_pending(), "the head to be parsed")
                assert not handler.closing()
                release.set()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                assert head.startswith(b"HTTP/1.1 200"), head
                handler.force_close()
                assert handler.closing()
            except AttributeError as exc:
                pytest.fail(broken("aiohttp", shim, f"a handler internal is gone ({exc})"))
        finally:
            writer.close()


async def test_aiohttp_forgotten_body_reads_empty() -> None:
    from hermes_gateway.control.aiohttp_shim import forget_body, remember_body

    shim = "hermes_gateway/control/aiohttp_shim.py"
    got: list[bytes] = []

    async def parse(request: web.Request) -> web.Response:
        await request.content.read()
        remember_body(request, b"{}")
        forget_body(request)
        got.append(await request.read())
        return web.Response()

    app = web.Application()
    app.router.add_post("/parse", parse)
    async with probe(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /parse HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert got == [b""], broken("aiohttp", shim, f"read() after forget gave {got}")
        finally:
            writer.close()


async def test_aiohttp_remembered_body_is_what_read_returns() -> None:
    from hermes_gateway.control.aiohttp_shim import remember_body

    shim = "hermes_gateway/control/aiohttp_shim.py"
    got: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        await request.content.read()  # the stream is drained, as `read_body` leaves it
        try:
            remember_body(request, b'{"kept": true}')
        except AttributeError as exc:
            got.append(repr(exc).encode())
            raise
        got.append(await request.read())
        return web.json_response(await request.json())

    app = web.Application()
    app.router.add_post("/echo", echo)
    async with probe(app) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert got == [b'{"kept": true}'], broken("aiohttp", shim, f"read() gave {got}")
        finally:
            writer.close()
