"""Default deny lives in the core: an adapter that calls no access code at all still cannot let
a stranger in, because `Gateway.submit` admits every message itself."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.platforms.adapter import AdapterHost, Health, StreamSink
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, last_user_text
from tests.harness import eventually, make_config, running_gateway
from tests.integration.test_discord_kit import (
    STRANGER,
    answered,
    discord_config,
    discord_gateway,
    fake_discord,
)


class ToyAdapter:
    """A platform that forgets access entirely: every message goes straight to `submit`."""

    def __init__(self, host: AdapterHost, name: str) -> None:
        self.host = host
        self.name = name
        self.sent: list[OutboundMessage] = []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)

    def health(self) -> Health:
        return Health(True)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None

    async def receive(self, user_id: str, text: str, message_id: str) -> str:
        event = MessageEvent.create(
            platform=self.name,
            chat_type="dm",
            chat_id=user_id,
            user_id=user_id,
            message_id=message_id,
            text=text,
        )
        return await self.host.submit(event)


def plugged(gw: Gateway, name: str) -> ToyAdapter:
    toy = ToyAdapter(gw.reception, name)
    gw.adapters[name] = toy
    return toy


async def test_a_stranger_is_refused_by_the_core_and_an_allowed_user_answered(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # the telegram section holds the rules; the toy adapter stands in for its platform
    config = make_config(
        tmp_path, fake_llm.base_url, platforms={"telegram": {"allowed_users": ["42"]}}
    )
    async with running_gateway(config) as (gw, _):
        toy = plugged(gw, "telegram")
        assert await toy.receive("666", "let me in", "1") == "refused"
        assert await toy.receive("42", "hello", "2") == "accepted"
        await eventually(lambda: any(m.text == "echo: hello" for m in toy.sent))
        assert not await gw.store.history("telegram:dm:666")
    assert [m.text for m in toy.sent] == ["echo: hello"]  # the stranger got nothing at all
    assert [last_user_text(r) for r in fake_llm.requests] == ["hello"]


async def test_the_core_sends_the_pairing_code_through_the_adapter(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, platforms={"telegram": {"pairing": True}})
    async with running_gateway(config) as (gw, _):
        toy = plugged(gw, "telegram")
        assert await toy.receive("777", "hi", "1") == "refused"
        entries = [e for e in await gw.pairing.entries() if e["user_id"] == "777"]
    assert len(entries) == 1 and entries[0]["status"] == "pending", entries
    assert len(toy.sent) == 1 and toy.sent[0].kind == "notice"
    assert f"hermes pairing approve telegram {entries[0]['code']}" in toy.sent[0].text


async def test_the_bots_own_message_and_a_platform_without_rules_are_refused(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, platforms={"telegram": {"allow_all": True}})
    async with running_gateway(config) as (gw, _):
        toy = plugged(gw, "telegram")
        event = MessageEvent.create(
            platform="telegram", chat_type="dm", chat_id="5", user_id="5", message_id="1", text="x"
        )
        assert await gw.reception.submit(event, sender="self") == "refused"
        assert await gw.reception.submit(event, sender="bot") == "refused"
        unknown = plugged(gw, "toy")  # no config section: the default rules deny everyone
        assert await unknown.receive("5", "hello", "2") == "refused"
        odd = plugged(gw, "enabled")  # a name that is a method of the platforms config
        assert await odd.receive("5", "hello", "3") == "refused"
    assert toy.sent == [] and unknown.sent == [] and odd.sent == []


async def test_discord_refusals_keep_their_shape_through_the_core(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # a pairing code answers a DM as a plain post, a slash command privately (ephemeral), and
    # neither acknowledges the interaction first: as when the adapter admitted them itself
    with fake_discord() as fake:
        config = discord_config(tmp_path, fake_llm.base_url, fake, pairing=True)
        async with discord_gateway(config):
            dm = fake.send_dm("let me in", user_id=STRANGER, username="mallory")
            (code,) = await answered(fake, 1)
            fake.send_interaction("status", user_id=STRANGER, username="mallory", guild=False)
            await eventually(lambda: fake.interaction_responses)
    assert code["channel_id"] == dm["channel_id"] and not code.get("message_reference")
    (private,) = fake.interaction_responses
    assert (private["kind"], private["type"]) == ("callback", 4)
    assert private["data"]["flags"] & 64  # ephemeral
    assert "hermes pairing approve discord" in private["data"]["content"]
    assert fake_llm.requests == []
