"""Exactly once on WhatsApp through `hermes gateway run`, SIGKILLed and restarted: with a message
in flight (the model answering) nothing is lost and one answer goes out; killed right after
the fake Cloud API took part 2 of a reply, before the gateway heard back, the restart does not
send part 2 again: the part's status webhook, redelivered by the fake as Meta redelivers one
the dead process never acknowledged, carries the part's key back (biz_opaque_callback_data)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.chaos.killing import Armed, killer
from tests.chaos.test_exactly_once import crash_then_restart, model, start, stop
from tests.chaos.test_store_faults import sqlite_fault
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, hang, text
from tests.fakes.server import async_wait_until, wait_until
from tests.fakes.whatsapp import JSON, FakeWhatsApp
from tests.harness import eventually, make_config, running_gateway
from tests.security import keys

pytestmark = [pytest.mark.e2e]
ALICE = "15550001111"
PARAGRAPHS = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(500)) for n in (1, 2, 3)]


class KillingWhatsApp(FakeWhatsApp):
    """Kills the gateway the moment it took a text starting with the armed prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.trigger = Armed()

    def _accept(self, body: JSON) -> web.Response:
        response = super()._accept(body)
        if response.status == 200:
            self.trigger.check(str((body.get("text") or {}).get("body", "")))
        return response


@pytest.fixture
def wa() -> Iterator[KillingWhatsApp]:
    fake = KillingWhatsApp().start()
    try:
        yield fake  # type: ignore[misc]
    finally:
        fake.stop()


def wa_gateway(home: Path, llm: FakeOpenAI, fake: FakeWhatsApp, **section: Any) -> GatewayProcess:
    whatsapp = {
        "enabled": True,
        "api_base": fake.api_base,
        "phone_number_id": fake.phone_number_id,
        "allowed_users": [ALICE],
        "access_token": fake.token,
        "app_secret": fake.app_secret,
        "verify_token": fake.verify_token,
        **section,
    }
    gateway = GatewayProcess(home, {"model": model(llm), "platforms": {"whatsapp": whatsapp}})
    fake.webhook_url = f"{gateway.url}/whatsapp/webhook"
    return gateway


def test_a_part_taken_before_the_kill_is_proven_by_its_status_and_not_sent_again(
    tmp_path: Path, llm: FakeOpenAI, wa: KillingWhatsApp
) -> None:
    gw = wa_gateway(tmp_path / "home", llm, wa, doubt_wait_s=30)
    llm.push(text("\n\n".join(PARAGRAPHS)))  # three WhatsApp messages
    try:
        crash_then_restart(gw, wa.trigger, "part2", lambda: wa.send_text(ALICE, "three parts"))
        wait_until(lambda: len(wa.texts_to(ALICE)) >= 3, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert [t.split()[0] for t in wa.texts_to(ALICE)] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    assert 0 in wa.status_deliveries  # part 2's status found the gateway dead, then came again
    doubts = [e for e in gw.log_events() if e["event"] == "whatsapp.part_in_doubt"]
    assert [d["went_out"] for d in doubts] == [True]


def test_a_part_in_doubt_with_no_status_is_sent_again_after_the_wait(
    tmp_path: Path, llm: FakeOpenAI, wa: KillingWhatsApp
) -> None:
    """Without its status webhook nothing proves the part went out: after `doubt_wait_s` it
    is sent again, a double rather than a loss."""
    gw = wa_gateway(tmp_path / "home", llm, wa, doubt_wait_s=1)
    wa.status_retry_s = 0.0  # this Meta never reports (nor redelivers) the statuses
    llm.push(text("\n\n".join(PARAGRAPHS)))
    try:
        crash_then_restart(gw, wa.trigger, "part2", lambda: wa.send_text(ALICE, "three parts"))
        wait_until(lambda: len(wa.texts_to(ALICE)) >= 4, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert [t.split()[0] for t in wa.texts_to(ALICE)] == ["part1", "part2", "part2", "part3"]
    doubts = [e for e in gw.log_events() if e["event"] == "whatsapp.part_in_doubt"]
    assert [d["went_out"] for d in doubts] == [False]


def test_a_message_in_flight_at_the_kill_is_answered_once_after_the_restart(
    tmp_path: Path, llm: FakeOpenAI, wa: KillingWhatsApp
) -> None:
    gw = wa_gateway(tmp_path / "home", llm, wa)
    llm.push(hang(60), text("the one answer"))
    try:
        start(gw)
        _, status = wa.send_text(ALICE, "are you there?")
        assert status == 200  # answered only once the message was in the inbox
        wait_until(lambda: len(llm.requests) == 1, timeout=20)
        killer(gw)()  # the model is answering
        start(gw)
        wait_until(lambda: wa.texts_to(ALICE), timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert wa.texts_to(ALICE) == ["the one answer"]
    assert len(llm.requests) == 2  # the run was taken up again, and answered once


async def test_a_delivery_the_store_cannot_take_gets_a_503_and_its_redelivery_is_answered(
    tmp_path: Path, llm: FakeOpenAI, wa: KillingWhatsApp
) -> None:
    """The webhook says 200 only once the message is durable: while the store refuses writes
    Meta is told to deliver again, and the redelivery is taken and answered once."""
    section = {
        "enabled": True,
        "api_base": wa.api_base,
        "phone_number_id": wa.phone_number_id,
        "allowed_users": [ALICE],
        "access_token": wa.token,
        "app_secret": wa.app_secret,
        "verify_token": wa.verify_token,
    }
    model_section = {"api_key": keys.MODEL_KEY}
    config = make_config(
        tmp_path, llm.base_url, model=model_section, platforms={"whatsapp": section}
    )
    async with running_gateway(config) as (gw, _client):
        wa.webhook_url = f"http://127.0.0.1:{gw.control.port}/whatsapp/webhook"
        payload = wa.message(ALICE, "text", {"body": "keep me"})
        async with sqlite_fault(gw, ("PRAGMA query_only = ON", "PRAGMA query_only = OFF")):
            refused = await asyncio.to_thread(wa.deliver, payload)
        assert refused == 503
        assert llm.requests == []
        codes: list[int] = []

        async def redelivered() -> bool:  # Meta delivers again, with decreasing frequency
            codes.append(await asyncio.to_thread(wa.deliver, payload))
            await asyncio.sleep(0.2)
            return codes[-1] == 200

        await async_wait_until(redelivered, timeout=20)
        await eventually(lambda: wa.texts_to(ALICE))
        assert await asyncio.to_thread(wa.deliver, payload) == 200  # a late repeat: folded
        await asyncio.sleep(0.5)
    assert wa.texts_to(ALICE) == ["echo: keep me"]
