"""The long-term archive through the tools in a running gateway (local API, SQLite): retain,
recall by meaning with no word in common, reflect with citations, the keyword fallback while
the embeddings endpoint is down (and the vectors it gets later), extraction, auto-retain."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hermes_gateway.config import Config
from hermes_gateway.memory.service import DEGRADED, NOT_CONFIGURED
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.harness import make_config, running_gateway

TOOLS = ["hindsight_retain", "hindsight_recall", "hindsight_reflect"]
KITTEN = "Mittens the kitten sleeps on the sofa all afternoon"
BACKUP = "The nightly backup runs at 03:00 to the archive bucket"


@pytest.fixture
def store_section() -> dict[str, Any]:
    """SQLite in the test's home; test_archive_postgres.py runs these tests on PostgreSQL."""
    return {}


def archive_config(tmp_path: Path, llm: FakeOpenAI, store: dict[str, Any], **memory: Any) -> Config:
    return make_config(tmp_path, llm.base_url, tools={"enabled": TOOLS}, memory=memory, store=store)


def observations(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def retain(content: str, **extra: Any) -> Any:
    return tool_calls(("hindsight_retain", {"content": content, **extra}))


def recall(query: str) -> Any:
    return tool_calls(("hindsight_recall", {"query": query}))


async def test_retain_recall_by_meaning_and_reflect(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    async with running_gateway(archive_config(tmp_path, fake_llm, store_section)) as (gw, api):
        fake_llm.push(retain(KITTEN, tags=["home"], context="talking about pets"), text("ok"))
        await api.chat("remember the kitten")
        stored = observations(fake_llm.requests[-1])[-1]
        fake_llm.push(retain(BACKUP), text("ok"))
        await api.chat("remember the backup")
        # no word in common with either memory: only the vectors can find the kitten
        fake_llm.push(recall("feline pet"), text("found"))
        await api.chat("what do I have at home?")
        by_meaning = observations(fake_llm.requests[-1])[-1]
        fake_llm.push(
            tool_calls(("hindsight_reflect", {"query": "what is my cat called?"})),
            text("Your kitten is Mittens [m1]."),
            text("Mittens."),
        )
        assert (await api.chat("my cat's name?"))["text"] == "Mittens."
        inner, last = fake_llm.requests[-2], fake_llm.requests[-1]
        fake_llm.push(recall("feline pet"), text("nothing"))
        await api.chat("what do I have at home?", user="bob")
        bobs = observations(fake_llm.requests[-1])[-1]
    assert stored == "Stored 1 memory (m1)."
    first = by_meaning.splitlines()[0]
    assert first.startswith("[m1] ") and KITTEN in first
    assert "(api:dm:alice, message " in first  # where it came from
    assert "{context: talking about pets}" in first and first.endswith("#home")
    assert "[" + DEGRADED not in by_meaning
    assert inner["messages"][0]["content"].startswith("Answer the question using only")
    assert "[m1] " in inner["messages"][1]["content"] and KITTEN in inner["messages"][1]["content"]
    assert observations(last)[-1] == "Your kitten is Mittens [m1]."
    assert bobs == "(no memory matches 'feline pet')"  # alice's bank is not bob's


async def test_keyword_fallback_while_embeddings_are_down(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    fake_llm.embeddings_down = True
    config = archive_config(tmp_path, fake_llm, store_section, embeddings={"outage_pause_s": 1})
    async with running_gateway(config) as (gw, api):
        with capture_logs() as logs:
            fake_llm.push(retain(KITTEN), text("ok"))
            await api.chat("remember the kitten")
            stored = observations(fake_llm.requests[-1])[-1]
            fake_llm.push(recall("kitten"), text("ok"))
            await api.chat("kitten?")
            by_word = observations(fake_llm.requests[-1])[-1]
            fake_llm.push(recall("feline pet"), text("ok"))
            await api.chat("pet?")
            by_meaning_down = observations(fake_llm.requests[-1])[-1]
        asked = len(fake_llm.embedding_inputs)
        fake_llm.embeddings_down = False
        await asyncio.sleep(1.1)  # the outage pause: until then, no embeddings call at all
        fake_llm.push(recall("feline pet"), text("ok"))
        await api.chat("pet, now?")
        by_meaning_back = observations(fake_llm.requests[-1])[-1]
    assert stored.startswith("Stored 1 memory (m1). [" + DEGRADED)
    assert KITTEN in by_word.splitlines()[0] and by_word.endswith(f"[{DEGRADED}]")
    assert by_meaning_down == f"(no memory matches 'feline pet')\n[{DEGRADED}]"
    assert KITTEN in by_meaning_back.splitlines()[0]  # its vector was added at this recall
    down = [e for e in logs if e["event"] == "memory.embeddings_unavailable"]
    assert len(down) == 1  # logged once per outage, not per call
    assert asked == 1  # the first call failed; the next ones did without it for the pause


async def test_extract_stores_each_fact(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    async with running_gateway(archive_config(tmp_path, fake_llm, store_section, extract=True)) as (
        gw,
        api,
    ):
        fake_llm.push(
            retain("long rambling text about pizza and a Lisbon trip"),
            text("- Prefers vegetarian pizza\n- Flight to Lisbon on 3 May\n"),
            text("ok"),
        )
        await api.chat("remember all that")
        extraction = fake_llm.requests[-2]
        stored = observations(fake_llm.requests[-1])[-1]
        fake_llm.push(recall("holiday journey"), text("ok"))
        await api.chat("travel?")
        found = observations(fake_llm.requests[-1])[-1]
    assert extraction["messages"][0]["content"].startswith("Extract the durable facts")
    assert stored == "Stored 2 memories (m1, m2)."
    assert found.splitlines()[0].endswith("Flight to Lisbon on 3 May")


async def test_auto_retain_keeps_each_turn_in_the_users_bank(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    config = archive_config(tmp_path, fake_llm, store_section, auto_retain=True)
    async with running_gateway(config) as (gw, api):
        await api.chat("I am allergic to peanuts")
        archive = gw.memory.service.archive  # type: ignore[union-attr]
        assert await _eventually_count(archive, "api/alice", 1)
        fake_llm.push(recall("diet food"), text("ok"))
        await api.chat("what should I not eat?", user="alice")
        found = observations(fake_llm.requests[-1])[-1]
        assert await archive.count("api/bob") == 0
    first = found.splitlines()[0]
    assert first.startswith("[m1] ") and first.endswith("User: I am allergic to peanuts")
    assert "(api:dm:alice, message " in first


async def _eventually_count(archive: Any, bank: str, n: int) -> bool:
    for _ in range(100):
        if await archive.count(bank) >= n:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_recall_is_trimmed_to_the_token_budget(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    config = archive_config(tmp_path, fake_llm, store_section, token_budget=100)
    long = "the kitten chased a feline friend around the pet shop " * 6  # ~80 tokens each
    async with running_gateway(config) as (gw, api):
        for n in range(3):
            fake_llm.push(retain(f"{n}: {long}"), text("ok"))
            await api.chat(f"remember {n}")
        fake_llm.push(recall("kitten"), text("ok"))
        await api.chat("kittens?")
        found = observations(fake_llm.requests[-1])[-1]
        fake_llm.push(tool_calls(("hindsight_reflect", {"query": "postgres schema"})), text("none"))
        await api.chat("db?", user="carol")
        nothing = observations(fake_llm.requests[-1])[-1]
    assert len(found.splitlines()) == 1  # three match; one fits in 100 tokens
    assert nothing == "Nothing in the archive bears on 'postgres schema'."


async def test_without_an_embeddings_endpoint_recall_uses_keywords(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # a hosted endpoint without a key is not usable: nothing is sent there
    hosted = {"base_url": "https://embeddings.example.invalid/v1"}
    config = archive_config(tmp_path, fake_llm, {}, embeddings=hosted)
    async with running_gateway(config) as (gw, api):
        fake_llm.push(retain(KITTEN), text("ok"))
        await api.chat("remember")
        stored = observations(fake_llm.requests[-1])[-1]
        fake_llm.push(recall("kitten sofa"), text("ok"))
        await api.chat("kitten?")
        found = observations(fake_llm.requests[-1])[-1]
        _, status = await api.get("/status", operator=True)
    assert stored == f"Stored 1 memory (m1). [{NOT_CONFIGURED}; it is found by its words for now]"
    assert KITTEN in found.splitlines()[0] and found.endswith(f"[{NOT_CONFIGURED}]")
    assert status["memory"]["embeddings"] == "not configured (keyword recall)"
    assert fake_llm.embedding_inputs == []
