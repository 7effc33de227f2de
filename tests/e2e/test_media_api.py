"""Files the agent sends (`send_file`) on the local API, through `hermes gateway run`: the answer
names a link under the control port that only the session's client can fetch, the file is read
when fetched, and `hermes chat` saves it and says where."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_gateway.cli.chat import ChatClient
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls

pytestmark = pytest.mark.e2e
CSV = b"a,b\n1,2\n"


@pytest.fixture
def gw(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    config = {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "tools": {"enabled": ["write_file", "send_file"]},
    }
    gateway = GatewayProcess(tmp_path / "home", config)
    yield gateway.start()
    gateway.kill()


def script(llm: FakeOpenAI) -> None:
    llm.push(
        tool_calls(("write_file", {"path": "out/r.csv", "content": CSV.decode()})),
        tool_calls(("send_file", {"path": "out/r.csv", "caption": "numbers"})),
        text("Here it is."),
    )


def test_the_answer_links_a_file_only_its_session_can_fetch(
    gw: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    script(fake_llm)
    body = {"model": "hermes", "user": "alice", "messages": [{"role": "user", "content": "go"}]}
    answer = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"] == "Here it is."
    [link] = answer["hermes"]["files"]
    assert (link["name"], link["caption"], link["kind"]) == ("r.csv", "numbers", "document")
    assert link["url"].startswith("/v1/files/")
    url = f"{gw.url}{link['url']}"
    assert httpx.get(url, params={"user": "bob"}).status_code == 404
    assert httpx.get(url).status_code == 404
    assert httpx.get(f"{gw.url}/v1/files/guessed", params={"user": "alice"}).status_code == 404
    (gw.home / "workspace" / "out" / "r.csv").write_bytes(b"changed")  # read when fetched
    got = httpx.get(url, params={"user": "alice"})
    assert got.status_code == 200 and got.content == b"changed"
    assert 'filename="r.csv"' in got.headers["Content-Disposition"]


@pytest.mark.parametrize("stream", [True, False])
def test_hermes_chat_saves_the_file_and_says_where(
    gw: GatewayProcess, fake_llm: FakeOpenAI, tmp_path: Path, stream: bool
) -> None:
    script(fake_llm)
    out = io.StringIO()
    saved = tmp_path / "saved"
    client = ChatClient(gw.url, None, "carol", stream=stream, out=out, downloads=saved)
    client.send("go")
    assert (saved / "r.csv").read_bytes() == CSV
    assert f"[file saved: {saved / 'r.csv'}]" in out.getvalue()
    assert "Here it is." in out.getvalue()
