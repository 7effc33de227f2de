"""`hermes_gateway.platforms.downloader`: the host check, safe names, the size cap (announced,
Content-Length, streamed), error classes and retries, against the fake Discord CDN and the
fake Slack files; the expiry of Discord's signed links."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yarl

from adapters.discord.adapter import CDN_HOSTS
from adapters.discord.cdn import EXPIRY_MARGIN_S, expired, expires_at
from adapters.slack.api import file_downloader
from adapters.slack.settings import SlackConfig
from hermes_gateway.errors import PermanentAdapterError, TransientAdapterError
from hermes_gateway.events import Attachment
from hermes_gateway.platforms.downloader import (
    Downloader,
    _Spool,
    _without_path,
    allowed_url,
    origins,
    safe_name,
)
from tests.e2e.daemon import free_port
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack

PNG = b"\x89PNG\r\n\x1a\n" + bytes(56)


@pytest.fixture
def cdn() -> Iterator[FakeDiscord]:
    fake = FakeDiscord().start()
    yield fake
    fake.stop()
    assert fake.errors == []


@pytest.fixture
async def downloader(cdn: FakeDiscord, tmp_path: Path) -> AsyncIterator[Downloader]:
    dl = Downloader("discord", tmp_path / "media", 1000, origins(*CDN_HOSTS, cdn.cdn_base))
    dl.base_delay = 0.01
    yield dl
    await dl.aclose()


def attachment(payload: dict, **changes: object) -> Attachment:
    fields = {
        "kind": "image",
        "file_id": payload["id"],
        "name": payload["filename"],
        "size": payload["size"],
        "url": payload["url"],
    }
    return Attachment(**{**fields, **changes})  # type: ignore[arg-type]


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/dot.png",
        "https://cdn.discordapp.com.evil.example/dot.png",
        "https://cdn.discordapp.com@evil.example/dot.png",  # userinfo: the host is evil.example
        "https://user:pw@cdn.discordapp.com/dot.png",
        "http://cdn.discordapp.com/dot.png",  # not https
        "https://cdn.discordapp.com:8443/dot.png",
        "file:///etc/passwd",
        "//cdn.discordapp.com/dot.png",
        "not a url",
        "",
    ],
)
def test_urls_off_the_platforms_hosts_are_refused(url: str) -> None:
    with pytest.raises(PermanentAdapterError, match=r"refusing to download|no usable download"):
        allowed_url(url, origins(*CDN_HOSTS))


def test_the_platforms_hosts_and_the_configured_base_are_allowed() -> None:
    allowed = origins(*CDN_HOSTS, "http://127.0.0.1:8080")
    assert allowed_url("https://CDN.discordapp.com/a/b/c.png?ex=1", allowed).host == (
        "cdn.discordapp.com"
    )
    assert allowed_url("https://media.discordapp.net/a.png", allowed).port == 443
    assert allowed_url("http://127.0.0.1:8080/attachments/1/2/a.png", allowed).port == 8080
    with pytest.raises(PermanentAdapterError, match=r"127\.0\.0\.1:8081"):
        allowed_url("http://127.0.0.1:8081/attachments/1/2/a.png", allowed)


async def test_a_foreign_host_is_never_contacted(
    downloader: Downloader, cdn: FakeDiscord, tmp_path: Path
) -> None:
    other = f"http://localhost:{cdn.port}/attachments/1/2/dot.png"  # the same server, by name
    with pytest.raises(PermanentAdapterError, match=f"localhost:{cdn.port}"):
        await downloader.fetch(Attachment("image", "1", "dot.png", "image/png", 4, other))
    assert cdn.file_requests == []
    assert files_in(tmp_path / "media") == []


@pytest.mark.parametrize(
    ("file_id", "name", "expected"),
    [
        ("123", "cat.png", "123-cat.png"),
        ("123", "../../etc/passwd", "123-_.._etc_passwd"),
        ("../x", ".hidden", "x-hidden"),
        ("F1", "", "F1-file"),
        ("", "résumé v2.pdf", "r_sum_v2.pdf"),
        ("1", "a" * 300 + ".png", "1-" + "a" * 96 + ".png"),
    ],
)
def test_safe_names_stay_in_the_folder(file_id: str, name: str, expected: str) -> None:
    assert safe_name(file_id, name) == expected


async def test_a_download_lands_under_a_safe_name_once(
    downloader: Downloader, cdn: FakeDiscord, tmp_path: Path
) -> None:
    payload = cdn.add_file("../up.png", PNG, "image/png")
    first = await downloader.fetch(attachment(payload))
    again = await downloader.fetch(attachment(payload))
    assert first == again == tmp_path / "media" / f"{payload['id']}-_up.png"
    assert first.read_bytes() == PNG
    assert len(cdn.file_requests) == 1  # the second call found the finished file
    assert files_in(tmp_path / "media") == [first.name]


async def test_the_announced_size_is_checked_before_any_request(
    downloader: Downloader, cdn: FakeDiscord, tmp_path: Path
) -> None:
    payload = cdn.add_file("big.png", bytes(5000), "image/png")
    with pytest.raises(PermanentAdapterError, match=r"big.png is 5000 bytes \(the cap is 1000\)"):
        await downloader.fetch(attachment(payload))
    assert cdn.file_requests == []


async def test_content_length_over_the_cap_is_refused(
    downloader: Downloader, cdn: FakeDiscord, tmp_path: Path
) -> None:
    payload = cdn.add_file("big.png", bytes(5000), "image/png", size=10)
    with pytest.raises(PermanentAdapterError, match=r"is 5000 bytes \(the cap is 1000\)"):
        await downloader.fetch(attachment(payload))
    assert len(cdn.file_requests) == 1
    assert files_in(tmp_path / "media") == []


async def test_the_cap_holds_while_streaming_and_the_part_file_goes(
    downloader: Downloader, cdn: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Spool, "flush_at", 256)  # so part of it reaches the disk first
    monkeypatch.setattr(downloader, "chunk_size", 256)
    payload = cdn.add_file("liar.png", bytes(200_000), "image/png", size=10, chunked=True)
    with pytest.raises(PermanentAdapterError, match="over the cap of 1000 bytes") as caught:
        await downloader.fetch(attachment(payload))
    assert "though 10 were announced" in str(caught.value)
    assert (tmp_path / "media").is_dir()
    assert files_in(tmp_path / "media") == []  # the hidden part file was removed


async def test_server_errors_are_retried(downloader: Downloader, cdn: FakeDiscord) -> None:
    payload = cdn.add_file("dot.png", PNG, "image/png")
    cdn.fail_file_next(503)
    assert (await downloader.fetch(attachment(payload))).read_bytes() == PNG
    cdn.fail_file_next(500, times=3)
    with pytest.raises(TransientAdapterError, match=r"discord answered HTTP 500 for x\.png"):
        await downloader.fetch(attachment(payload, file_id="2", name="x.png"))
    assert len(cdn.file_requests) == 5


@pytest.mark.parametrize(
    ("status", "message"),
    [(302, r"HTTP 302 for dot.png \(a redirect, not followed\)"), (404, "HTTP 404 for dot.png$")],
)
async def test_redirects_and_client_errors_are_not_retried(
    downloader: Downloader, cdn: FakeDiscord, status: int, message: str
) -> None:
    cdn.fail_file_next(status)
    with pytest.raises(PermanentAdapterError, match=message):
        await downloader.fetch(attachment(cdn.add_file("dot.png", PNG, "image/png")))
    assert len(cdn.file_requests) == 1


async def test_a_refused_connection_is_transient_after_the_retries(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    dl = Downloader("discord", tmp_path / "media", 1000, origins(dead))
    dl.base_delay = 0.01
    try:
        with pytest.raises(TransientAdapterError, match=r"downloading dot\.png failed: Cannot"):
            await dl.fetch(Attachment("image", "1", "dot.png", "image/png", 4, f"{dead}/dot.png"))
    finally:
        await dl.aclose()
    with pytest.raises(TransientAdapterError, match="shutting down"):
        await dl.fetch(Attachment("image", "1", "dot.png", "image/png", 4, f"{dead}/dot.png"))


def test_an_error_text_never_carries_the_urls_path() -> None:
    """Telegram's file URLs hold the bot token in their path."""
    url = yarl.URL("https://api.telegram.org/file/bot123:SECRET/documents/file_1.txt")
    text = f"Invalid URL {url}; path {url.path}"
    assert "SECRET" not in _without_path(text, url)
    assert _without_path("Cannot connect to host api.telegram.org:443", url).endswith(":443")


async def test_a_stalled_download_ends_at_the_deadline_without_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = asyncio.Event()

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + b"12c\r\n" + bytes(300) + b"\r\n")  # 300 bytes, then silence
        await writer.drain()
        await done.wait()
        writer.close()

    monkeypatch.setattr(_Spool, "flush_at", 256)  # the first bytes reach the part file
    server = await asyncio.start_server(stall, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    dl = Downloader("slack", tmp_path / "media", 1000, origins(base))
    dl.deadline_s = 0.3
    try:
        with pytest.raises(TransientAdapterError, match=r"took longer than 0\.3 s"):
            await dl.fetch(Attachment("image", "F1", "a.png", "image/png", 400, f"{base}/a.png"))
    finally:
        await dl.aclose()
        done.set()
        server.close()
        await server.wait_closed()
    assert (tmp_path / "media").is_dir()
    assert files_in(tmp_path / "media") == []


async def test_slack_needs_its_token_and_its_sign_in_page_is_no_file(tmp_path: Path) -> None:
    with FakeSlack() as slack:
        config = SlackConfig(api_base=slack.api_base, media_max_bytes=1000)
        dl = file_downloader(config, tmp_path / "media")
        file = slack.add_file("dot.png", PNG, "image/png")
        url = file["url_private"]
        item = Attachment("image", file["id"], "dot.png", "image/png", len(PNG), url)
        bearer = {"Authorization": f"Bearer {slack.bot_token}"}
        try:
            with pytest.raises(PermanentAdapterError, match=r"HTTP 401 .*files:read scope"):
                await dl.fetch(item)
            slack.signin_page = True
            with pytest.raises(PermanentAdapterError, match="with a sign-in page"):
                await dl.fetch(item)
            path = await dl.fetch(item, bearer)
        finally:
            await dl.aclose()
    assert path.read_bytes() == PNG
    assert [d["authorization"] for d in slack.downloads] == [None, None, bearer["Authorization"]]


def test_discord_link_expiry_is_read_from_the_signed_query() -> None:
    signed = "https://cdn.discordapp.com/attachments/1/2/a.png?ex=65a0b1c2&is=659f6042&hm=ab"
    assert expires_at(signed) == 0x65A0B1C2
    assert expired(signed, now=0x65A0B1C2 - EXPIRY_MARGIN_S)
    assert not expired(signed, now=0x65A0B1C2 - EXPIRY_MARGIN_S - 1)
    for unsigned in ("https://cdn.discordapp.com/a.png", "https://cdn/a.png?ex=zz", "::"):
        assert expires_at(unsigned) is None
        assert not expired(unsigned)  # tried as is: the CDN says if it is dead
