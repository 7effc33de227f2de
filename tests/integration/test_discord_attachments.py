"""Discord attachments fetched on demand: `vision_analyze` on an image a user sent, through the
real discord.py and the fake CDN; files over the cap, CDN errors and unreachable or foreign
hosts come back to the model as clear tool errors. Signed CDN links that expired (a message
replayed after an outage) are renewed through Discord's refresh endpoint."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import cdn as discord_cdn
from hermes_gateway.events import Attachment, MessageEvent
from hermes_gateway.store.store import Store
from tests.e2e.daemon import free_port
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_attachment, snowflake
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.integration.test_discord_kit import (
    ALICE,
    CHANNEL_ID,
    answered,
    discord_config,
    discord_gateway,
    fake_discord,
)
from tests.integration.test_tools_gateway import PNG, observations

VISION = {"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}}
FAILED = "Error: the attachment could not be fetched: "
DAY = 86400
RENEW_FAILED = f"{FAILED}discord: could not renew the expired link of "


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


def media_files(tmp_path: Path) -> list[str]:
    media = tmp_path / "home" / "media"
    return sorted(p.name for p in media.iterdir()) if media.exists() else []


def saw_the_dot(request: dict[str, Any]) -> bool:
    """The vision model got the image's bytes."""
    url = request["messages"][0]["content"][1]["image_url"]["url"]
    return bool(url == "data:image/png;base64," + base64.b64encode(PNG).decode())


def renewed_requests(fake: FakeDiscord) -> list[tuple[str, str]]:
    return [r for r in fake.requests if r == ("POST", "/attachments/refresh-urls")]


async def test_vision_reads_an_image_sent_in_a_dm(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    picture = fake.add_file("dot.png", PNG, "image/png")
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1, "question": "What colour?"})),
        text("A single red pixel."),
        text("Your picture is one red dot."),
    )
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config):
        assert media_files(tmp_path) == []
        fake.send_dm("what is this?", user_id=ALICE, attachments=[picture])
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "Your picture is one red dot."
    vision = fake_llm.requests[1]
    assert vision["model"] == "vision-model"
    parts = vision["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "What colour?"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert observations(fake_llm.requests[2]) == ["A single red pixel."]
    [request] = fake.file_requests
    assert "Authorization" not in request["headers"]  # the bot token never goes to the CDN
    assert media_files(tmp_path) == [f"{picture['id']}-dot.png"]


async def test_files_over_the_cap_are_refused_and_nothing_is_written(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    big = fake.add_file("big.png", PNG + bytes(2000), "image/png")
    # announces a small size, then streams more than the cap without a Content-Length
    liar = fake.add_file("liar.png", PNG + bytes(50_000), "image/png", size=len(PNG), chunked=True)
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1}), ("vision_analyze", {"attachment": 2})),
        text("Both are too big for me."),
    )
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION, media_max_bytes=1000)
    async with discord_gateway(config):
        fake.send_dm("look", user_id=ALICE, attachments=[big, liar])
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "Both are too big for me."
    refused_big, refused_liar = observations(fake_llm.requests[1])
    assert refused_big == f"{FAILED}big.png is {len(PNG) + 2000} bytes (the cap is 1000)"
    assert refused_liar.startswith(f"{FAILED}liar.png is over the cap of 1000 bytes (stopped")
    assert refused_liar.endswith(f"though {len(PNG)} were announced)")
    assert [r["path"].rsplit("/", 1)[-1] for r in fake.file_requests] == ["liar.png"]
    assert media_files(tmp_path) == []


async def test_a_failing_cdn_is_retried_then_reported(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    picture = fake.add_file("dot.png", PNG, "image/png")
    fake_llm.push(tool_calls(("vision_analyze", {"attachment": 1})), text("The image is down."))
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config) as (*_, adapter):
        adapter.downloader.base_delay = 0.01
        fake.fail_file_next(500, times=3)
        fake.send_dm("what is this?", user_id=ALICE, attachments=[picture])
        (reply,) = await answered(fake, 1)
        fake_llm.push(
            tool_calls(("vision_analyze", {"attachment": 1})), text("A red dot."), text("Red.")
        )
        fake.send_dm("and now?", user_id=ALICE, attachments=[picture])
        (_, after) = await answered(fake, 2)
    assert reply["content"] == "The image is down."
    assert observations(fake_llm.requests[1]) == [f"{FAILED}discord answered HTTP 500 for dot.png"]
    assert len(fake.file_requests) == 4  # three attempts, then the next message's one
    assert after["content"] == "Red."


async def test_unreachable_and_foreign_hosts_give_tool_errors(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    unreachable = make_attachment(
        "dot.png",
        url=f"{dead}/attachments/1/2/dot.png",
        size=len(PNG),
        content_type="image/png",
        attachment_id=snowflake(),
    )
    foreign = fake.add_file("dot.png", PNG, "image/png")  # on the fake, not on cdn_base now
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1}), ("vision_analyze", {"attachment": 2})),
        text("I could not open either."),
    )
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION, cdn_base=dead)
    async with discord_gateway(config) as (*_, adapter):
        adapter.downloader.base_delay = 0.01
        fake.send_dm("look", user_id=ALICE, attachments=[unreachable, foreign])
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "I could not open either."
    refused, elsewhere = observations(fake_llm.requests[1])
    assert refused.startswith(f"{FAILED}discord: downloading dot.png failed: Cannot connect")
    assert elsewhere == (
        f"{FAILED}refusing to download from 127.0.0.1:{fake.port}: not one of the platform's "
        "file hosts"
    )
    assert fake.file_requests == []
    assert media_files(tmp_path) == []


async def test_an_expired_link_is_renewed_before_the_download(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    picture = fake.add_file("dot.png", PNG, "image/png", expires_in=-DAY)  # sent two days ago
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1})), text("A red dot."), text("Red.")
    )
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config):
        fake.send_dm("what is this?", user_id=ALICE, attachments=[picture])
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "Red."
    assert saw_the_dot(fake_llm.requests[1])
    assert observations(fake_llm.requests[2]) == ["A red dot."]
    assert fake.refreshed == [picture["url"]]
    [request] = fake.file_requests  # the dead link was never tried: only the renewed one
    assert "Authorization" not in request["headers"]
    assert media_files(tmp_path) == [f"{picture['id']}-dot.png"]


async def test_a_link_the_cdn_refuses_is_renewed_and_fetched_again(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    picture = fake.add_file("dot.png", PNG, "image/png")
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1})), text("A red dot."), text("Red.")
    )
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config):
        # our clock says the link is valid; the CDN's says it expired a day ago
        fake.cdn_clock_skew = 2 * DAY
        fake.send_dm("what is this?", user_id=ALICE, attachments=[picture])
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "Red."
    assert saw_the_dot(fake_llm.requests[1])
    assert fake.refreshed == [picture["url"]]
    assert len(fake.file_requests) == 2  # 404 for the old link, then the renewed one


async def test_a_message_replayed_after_a_long_outage_still_has_its_image(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    """Accepted, then the gateway was down for two days: the replay renews the dead link."""
    picture = fake.add_file("dot.png", PNG, "image/png", expires_in=-DAY)
    sent = fake.send_message("<@1000> what is this?", user_id=ALICE, attachments=[picture])
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    assert [e for e, _ in fake.undelivered] == ["MESSAGE_CREATE"]  # the gateway was down
    await accepted_before_the_outage(config.store_url, sent, picture)
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1})), text("A red dot."), text("Red.")
    )
    async with discord_gateway(config):
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "Red."
    assert saw_the_dot(fake_llm.requests[1])
    assert fake.refreshed == [picture["url"]]


async def accepted_before_the_outage(store_url: str, sent: dict[str, Any], file: dict) -> None:
    attachment = Attachment("image", file["id"], "dot.png", "image/png", len(PNG), file["url"])
    event = MessageEvent.create(
        platform="discord",
        chat_type="group",
        chat_id=str(CHANNEL_ID),
        user_id=str(ALICE),
        message_id=sent["id"],
        text="what is this?",
        attachments=(attachment,),
        mentioned=True,
    )
    store = Store(store_url)
    await store.open()
    try:
        assert await store.accept(event) is not None
    finally:
        await store.close()


async def test_links_that_cannot_be_renewed_give_clear_errors(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    gone = fake.add_file("gone.png", PNG, "image/png", expires_in=-DAY)
    fake.delete_file(gone)  # its message was deleted: Discord has no new link for it
    refused = fake.add_file("refused.png", PNG, "image/png", expires_in=-DAY)
    dead = fake.add_file("dead.png", PNG, "image/png", expires_in=-DAY)
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config):
        for n, (picture, fault) in enumerate([(gone, None), (refused, "api"), (dead, "cdn")], 1):
            if fault == "api":
                fake.fail_next("POST", "^/attachments/refresh-urls$", 403)
            if fault == "cdn":
                fake.fail_file_next(404)  # the renewed link is refused too
            fake_llm.push(tool_calls(("vision_analyze", {"attachment": 1})), text(f"No {n}."))
            fake.send_dm("look", user_id=ALICE, attachments=[picture])
            await answered(fake, n)
    errors = [observations(r)[-1] for r in fake_llm.requests[1::2]]
    assert errors == [
        f"{RENEW_FAILED}gone.png: Discord has no newer one (was the message deleted?)",
        f"{RENEW_FAILED}refused.png: Discord answered HTTP 403 (403: Forbidden)",
        f"{FAILED}discord answered HTTP 404 for dead.png (a link Discord had just renewed)",
    ]
    assert len(renewed_requests(fake)) == 3
    assert [r["path"].rsplit("/", 1)[-1] for r in fake.file_requests] == ["dead.png"]
    assert media_files(tmp_path) == []


async def test_a_renewal_stuck_behind_a_rate_limit_fails_in_time(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discord_cdn, "RENEW_TIMEOUT_S", 0.3)
    picture = fake.add_file("dot.png", PNG, "image/png", expires_in=-DAY)
    fake.fail_next("POST", "^/attachments/refresh-urls$", 429, retry_after=30)
    fake_llm.push(tool_calls(("vision_analyze", {"attachment": 1})), text("Not now."))
    config = discord_config(tmp_path, fake_llm.base_url, fake, tools=VISION)
    async with discord_gateway(config):
        fake.send_dm("look", user_id=ALICE, attachments=[picture])
        (reply,) = await answered(fake, 1)  # discord.py would sleep 30 s on that 429
    assert reply["content"] == "Not now."
    assert observations(fake_llm.requests[1]) == [f"{RENEW_FAILED}dot.png: no answer in time"]
    assert fake.file_requests == []
