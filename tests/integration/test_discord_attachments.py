"""Discord attachments fetched on demand: `vision_analyze` on an image a user sent, through the
real discord.py and the fake CDN; files over the cap, CDN errors and unreachable or foreign
hosts come back to the model as clear tool errors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.daemon import free_port
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_attachment, snowflake
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.integration.test_discord_kit import (
    ALICE,
    answered,
    discord_config,
    discord_gateway,
    fake_discord,
)
from tests.integration.test_tools_gateway import PNG, observations

VISION = {"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}}
FAILED = "Error: the attachment could not be fetched: "


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


def media_files(tmp_path: Path) -> list[str]:
    media = tmp_path / "home" / "media"
    return sorted(p.name for p in media.iterdir()) if media.exists() else []


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
