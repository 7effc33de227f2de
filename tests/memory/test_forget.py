"""Forgetting: `hindsight_forget` deletes the asking user's memories by id or by a query it
showed first (never another user's, never on a first call), and `hermes memory forget` removes
a person's memories with the gateway up (the control API) or down (the store); a forgotten
memory leaves nothing in the keyword index, and neither recall path finds it again."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.config import Config
from hermes_gateway.memory.service import MEANING_ONLY
from hermes_gateway.store.archive_index import PG_DOCUMENT, PG_VECTOR
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI, tool_calls
from tests.fakes.openai import text as reply
from tests.harness import make_config, running_gateway

TOOLS = ["hindsight_retain", "hindsight_recall", "hindsight_forget"]
KITTEN = "Mittens the kitten sleeps on the sofa all afternoon"
BACKUP = "The nightly backup runs at 03:00 to the archive bucket"


def said(llm: FakeOpenAI) -> str:
    """The last tool observation of the last request."""
    found: str = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
    return found


async def call(api: Any, llm: FakeOpenAI, user: str, tool: str, **args: Any) -> str:
    llm.push(tool_calls((tool, args)), reply("ok"))
    await api.chat(f"{tool} please", user=user)
    return said(llm)


@pytest.fixture
def store_section() -> dict[str, Any]:
    """SQLite in the test's home; test_forget_postgres.py runs these tests on PostgreSQL."""
    return {}


_SQLITE_INDEX = {
    "docs": "SELECT id FROM memories_fts_docsize",
    "matched": "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'mittens OR kitten'",
}
_PG_INDEX = {
    "docs": f"SELECT id FROM memories WHERE {PG_DOCUMENT} IS NOT NULL",
    "matched": f"SELECT id FROM memories WHERE {PG_DOCUMENT} @@ "
    "to_tsquery('simple', 'mittens | kitten')",
}


async def indexed(config: Config) -> dict[str, set[int]]:
    """What the tables and the keyword index hold, read directly: memory rows, those with a
    vector (in the row; pgvector's column too where the server has it), the index's documents,
    and what the index matches for the kitten's words."""
    store = Store(config.store_url)
    await store.open()

    async def run(conn: AsyncConnection) -> dict[str, set[int]]:
        queries = {
            "rows": "SELECT id FROM memories",
            "vectors": "SELECT id FROM memories WHERE embedding IS NOT NULL",
            **(_SQLITE_INDEX if store._is_sqlite else _PG_INDEX),
        }
        found = {k: {int(r[0]) for r in await conn.execute(text(q))} for k, q in queries.items()}
        if not store._is_sqlite:
            has = f"SELECT 1 FROM information_schema.columns WHERE column_name = '{PG_VECTOR}'"
            if list(await conn.execute(text(has))):
                pg = f"SELECT id FROM memories WHERE {PG_VECTOR} IS NOT NULL"
                assert {int(r[0]) for r in await conn.execute(text(pg))} == found["vectors"]
        return found

    try:
        return await store._query(run)
    finally:
        await store.close()


def tool_config(tmp_path: Path, llm: FakeOpenAI, store: dict[str, Any]) -> Config:
    return make_config(tmp_path, llm.base_url, tools={"enabled": TOOLS}, store=store)


async def test_forget_by_confirmed_query_only_in_the_callers_bank(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    config = tool_config(tmp_path, fake_llm, store_section)
    async with running_gateway(config) as (gw, api):
        for user in ("alice", "bob"):  # the same memory in two banks: m1 alice's, m2 bob's
            await call(api, fake_llm, user, "hindsight_retain", content=KITTEN)
        await call(api, fake_llm, "alice", "hindsight_retain", content=BACKUP)
        early = await call(api, fake_llm, "alice", "hindsight_forget", query="kitten", confirm=True)
        shown = await call(api, fake_llm, "alice", "hindsight_forget", query="kitten")
        after_preview = (await indexed(config))["rows"]
        done = await call(api, fake_llm, "alice", "hindsight_forget", query="kitten", confirm=True)
        again = await call(api, fake_llm, "alice", "hindsight_forget", query="kitten", confirm=True)
        by_word = await call(api, fake_llm, "alice", "hindsight_recall", query="kitten")
        by_meaning = await call(api, fake_llm, "alice", "hindsight_recall", query="feline pet")
        bobs = await call(api, fake_llm, "bob", "hindsight_recall", query="feline pet")
        left = await indexed(config)
    assert early.startswith("Error: confirm: true deletes only what this same query showed")
    assert shown.startswith("Nothing deleted yet. 1 memories match 'kitten':")
    assert "[m1] " in shown and KITTEN in shown and "[m2]" not in shown  # bob's is not listed
    assert after_preview == {1, 2, 3}  # showing deletes nothing
    assert done == "Forgotten: m1."
    assert again.startswith("Error: confirm: true deletes only")  # a confirm is used once
    assert KITTEN not in by_word and BACKUP in by_word  # the keyword path, the vector path's
    assert KITTEN not in by_meaning  # the vector path alone
    assert bobs.startswith("[m2] ") and KITTEN in bobs  # bob's identical memory survives
    assert left["rows"] == left["docs"] == left["vectors"] == {2, 3}
    assert left["matched"] == {2}


async def test_forget_by_id_never_reaches_another_users_memory(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    config = tool_config(tmp_path, fake_llm, store_section)
    async with running_gateway(config) as (gw, api):
        await call(api, fake_llm, "alice", "hindsight_retain", content=KITTEN)
        await call(api, fake_llm, "bob", "hindsight_retain", content=KITTEN)
        # the vector path's matrix is cached for alice's bank before the deletion
        await call(api, fake_llm, "alice", "hindsight_recall", query="feline pet")
        meaning = await call(api, fake_llm, "alice", "hindsight_forget", query="feline pet")
        bob_tries = await call(api, fake_llm, "bob", "hindsight_forget", ids=[1])
        done = await call(api, fake_llm, "alice", "hindsight_forget", ids=["m1", 5])
        by_meaning = await call(api, fake_llm, "alice", "hindsight_recall", query="feline pet")
        by_word = await call(api, fake_llm, "alice", "hindsight_recall", query="mittens")
        bobs = await call(api, fake_llm, "bob", "hindsight_recall", query="mittens")
        left = await indexed(config)
    assert meaning.startswith("Nothing deleted yet.") and "[m1] " in meaning
    assert meaning.endswith(f"[{MEANING_ONLY}]")  # no word in common: the model is warned
    assert bob_tries == "Not in your archive: m1."
    assert done == "Forgotten: m1.\nNot in your archive: m5."
    assert KITTEN not in by_meaning and KITTEN not in by_word
    assert bobs.startswith("[m2] ")
    assert left["rows"] == left["docs"] == left["matched"] == {2}


async def test_bad_forget_arguments_are_clear_tool_errors(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    async with running_gateway(tool_config(tmp_path, fake_llm, store_section)) as (gw, api):
        await call(api, fake_llm, "alice", "hindsight_retain", content=KITTEN)
        errors = [
            await call(api, fake_llm, "alice", "hindsight_forget", **args)
            for args in (
                {},
                {"ids": [1], "query": "kitten"},
                {"ids": [1], "confirm": True},
                {"ids": ["kitten"]},
                {"query": "   "},
            )
        ]
        kept = await gw.memory.service.archive.count("api/alice")  # type: ignore[union-attr]
    assert kept == 1
    for error in errors:
        assert error.startswith("Error: invalid arguments for hindsight_forget:"), error
    assert "give either ids or a query" in errors[0] and "give either ids" in errors[1]
    assert "confirm goes with a query" in errors[2]
    assert "ids.0" in errors[3]
    assert "give either ids or a query" in errors[4]


async def hermes(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_gateway",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_cli_forgets_a_users_memories_with_the_gateway_up_and_down(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    config = tool_config(tmp_path, fake_llm, store_section)
    cfg = str(tmp_path / "config.yaml")
    async with running_gateway(config) as (gw, api):
        url = api.base
        for user, content in [("alice", KITTEN), ("alice", BACKUP), ("bob", KITTEN)] * 2:
            await call(api, fake_llm, user, "hindsight_retain", content=content)
        # m1..m6: alice 1 2 4 5, bob 3 6
        forget = ("memory", "forget", "--config", cfg, "--url", url)
        bad = await hermes(*forget, "--user", "alice", "--all")
        by_id = await hermes(*forget, "--user", "api:alice", "m1", "3")
        everything = await hermes(*forget, "--user", "api:alice", "--all")
        by_word = await call(api, fake_llm, "alice", "hindsight_recall", query="kitten backup")
        up = await indexed(config)
    async with running_gateway(config) as (gw, api):
        await call(api, fake_llm, "alice", "hindsight_retain", content=KITTEN)  # m7
        await call(api, fake_llm, "bob", "hindsight_retain", content=BACKUP)  # m8
    forget = ("memory", "forget", "--config", cfg, "--url", url)  # nothing listens there now
    down_id = await hermes(*forget, "--user", "api:bob", "3")
    down_all = await hermes(*forget, "--user", "api:alice", "--all")
    down = await indexed(config)
    assert bad[0] == 2 and "PLATFORM:USER" in bad[2]
    assert by_id[0] == 0, by_id
    assert "forgot 1 memory of api/alice: m1" in by_id[1]
    assert "not in that user's archive: m3" in by_id[1]  # bob's: not touched
    assert everything[0] == 0 and "forgot 3 memories of api/alice: m2, m4, m5" in everything[1]
    assert by_word == "(no memory matches 'kitten backup')"
    assert up["rows"] == up["docs"] == {3, 6}
    assert (
        down_id[0] == 0
        and "forgot 1 memory of api/bob (the gateway is not running): m3" in (down_id[1])
    )
    assert down_all[0] == 0 and "forgot 1 memory of api/alice" in down_all[1]
    assert down["rows"] == down["docs"] == {6, 8}
    assert down["matched"] == {6}


async def test_the_operator_route_works_with_the_archive_tools_off(
    tmp_path: Path, fake_llm: FakeOpenAI, store_section: dict[str, Any]
) -> None:
    """A person's data is removable whatever the tools are now: memories kept while the archive
    was on go with the archive off too; malformed requests are refused with what to send."""
    from hermes_gateway.memory.archive import Archive

    config = make_config(tmp_path, fake_llm.base_url, store=store_section)  # no hindsight_* tool
    async with running_gateway(config) as (gw, api):
        assert gw.memory.service is None
        row = {"content": KITTEN, "context": "", "tags": "", "created_at": 1.0}
        row.update(session_key="", message_id="", embedding=None, model="")
        await Archive(gw.store).add([{**row, "bank": b} for b in ("api/alice", "api/bob")])
        url = f"{api.base}/memory/forget"
        answers = []
        for body in (
            {"user": "alice", "all": True},
            {"user": "api:alice"},
            {"user": "api:alice", "all": True, "ids": [1]},
            {"user": "api:alice", "ids": [True]},
            {"user": "api:alice", "ids": [2, 1]},
        ):
            async with api.http.post(url, json=body, headers=api.operator) as resp:
                answers.append((resp.status, await resp.json()))
        left = await indexed(config)
    assert [status for status, _ in answers] == [400, 400, 400, 400, 200]
    assert "PLATFORM:USER" in answers[0][1]["error"]["message"]
    assert "either 'all': true or 'ids'" in answers[1][1]["error"]["message"]
    assert answers[4][1] == {"bank": "api/alice", "forgotten": [1], "missing": [2], "scope": "user"}
    assert left["rows"] == left["docs"] == left["matched"] == {2}
