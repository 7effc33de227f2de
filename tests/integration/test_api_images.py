"""Images sent to the local API inline (`image_url` data: URLs): an image alone is a message,
and `vision_analyze` reads it; a link is not fetched on the client's behalf."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.harness import make_config, running_gateway
from tests.integration.test_tools_gateway import PNG, observations

VISION = {"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}}
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def _image_only(url: str) -> dict[str, Any]:
    part = {"type": "image_url", "image_url": {"url": url}}
    return {"user": "pics", "messages": [{"role": "user", "content": [part]}]}


async def test_vision_reads_an_inline_image(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1, "question": "What colour?"})),
        text("A single red pixel."),
        text("One red dot."),
    )
    config = make_config(tmp_path, fake_llm.base_url, tools=VISION)
    async with running_gateway(config) as (gw, client):
        url = f"{client.base}/v1/chat/completions"
        async with client.http.post(url, data=json.dumps(_image_only(DATA_URL))) as resp:
            body = await resp.json()
    assert resp.status == 200, body
    assert body["choices"][0]["message"]["content"] == "One red dot."
    assert fake_llm.requests[0]["messages"][-1]["content"] == "[attached image 1]"
    assert fake_llm.requests[1]["messages"][0]["content"][1]["image_url"]["url"] == DATA_URL
    assert observations(fake_llm.requests[2]) == ["A single red pixel."]
    saved = list((tmp_path / "home" / "media").iterdir())
    assert len(saved) == 1 and saved[0].stat().st_mode & 0o077 == 0


async def test_an_image_link_is_not_fetched(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1})),
        text("I cannot open that link."),
    )
    config = make_config(tmp_path, fake_llm.base_url, tools=VISION)
    async with running_gateway(config) as (gw, client):
        url = f"{client.base}/v1/chat/completions"
        body = _image_only("http://169.254.169.254/latest/meta-data")
        async with client.http.post(url, data=json.dumps(body)) as resp:
            assert resp.status == 200
    [seen] = observations(fake_llm.requests[1])
    assert "only inline images" in seen
