"""The local API against the official `openai` SDK and a real gateway process: completions,
streams with usage, errors as `APIStatusError`s, overlapping requests, stateless requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, error, text
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path_factory.mktemp("api") / "home",
        {
            "model": {"base_url": model.base_url, "api_key": "sk-fake", "max_retries": 0},
            # the overtaking cases need `interrupt`; the API's own default (`queue`) is
            # tests/integration/test_api_busy.py's
            "platforms": {"api": {"busy_policy": "interrupt"}},
        },
    )
    gw.start()
    yield gw
    gw.kill()


@pytest.fixture
def fake(model: FakeOpenAI) -> Iterator[FakeOpenAI]:
    model.reset()
    yield model
    model.reset()


@pytest.fixture
def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)


def _say(content: str) -> list[Any]:
    return [{"role": "user", "content": content}]


def test_a_completion_has_real_usage_and_one_id_format(
    client: openai.OpenAI, fake: FakeOpenAI
) -> None:
    fake.push(text("Hello there", usage=USAGE))
    done = client.chat.completions.create(model="m", messages=_say("hi"), user="conf-1")
    assert done.choices[0].message.content == "Hello there"
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.model_dump() == USAGE | {
        "completion_tokens_details": None,
        "prompt_tokens_details": None,
    }
    fake.push(text("streamed", usage=USAGE))
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=_say("again"),
            user="conf-1",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 18
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].id.startswith("chatcmpl-") and len(chunks[0].id) == len(done.id)


def test_model_errors_raise_status_errors(
    client: openai.OpenAI, fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.push(error(500), error(500))
    with pytest.raises(openai.APIStatusError) as down:
        client.chat.completions.create(model="m", messages=_say("x"), user="conf-2")
    assert down.value.status_code == 502
    assert "unavailable" in down.value.message
    with pytest.raises(openai.APIStatusError) as streamed:
        list(client.chat.completions.create(model="m", messages=_say("y"), stream=True))
    assert streamed.value.status_code == 502
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[])
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="hi")
    with pytest.raises(openai.NotFoundError):
        client.get("/nowhere", cast_to=httpx.Response)
    with pytest.raises(openai.APIStatusError) as wrong_method:
        client.get("/chat/completions", cast_to=httpx.Response)
    assert wrong_method.value.status_code == 405
    assert wrong_method.value.body == {
        "message": "Method Not Allowed",
        "type": "invalid_request_error",
        "param": None,
        "code": "method_not_allowed",
    }


def test_no_model_configured_is_a_503(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "home", {"model": {"base_url": "", "api_key": ""}})
    gw.start()
    try:
        sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            sdk.chat.completions.create(model="m", messages=_say("hello?"), user="conf-3")
        assert caught.value.status_code == 503
        assert "model.api_key" in caught.value.message
    finally:
        gw.kill()


def test_an_overtaken_request_is_told_so_not_given_the_next_answer(
    gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    fake.push(text("first answer " * 20, chunk_size=6, chunk_delay=0.3), text("second answer"))
    url = f"{gateway.url}/v1/chat/completions"
    body = {"user": "overlap", "stream": True, "messages": _say("first")}
    lines: list[str] = []

    def first() -> None:
        with httpx.stream("POST", url, json=body, timeout=30) as r:
            lines.extend(line for line in r.iter_lines() if line)

    reader = threading.Thread(target=first, daemon=True)
    reader.start()
    wait_until(lambda: any("first" in line for line in lines[1:]) or len(fake.requests) > 0)
    wait_until(lambda: len(fake.requests) == 1)
    second = gateway.chat("second", user="overlap").json()
    reader.join(20)
    assert second["choices"][0]["message"]["content"] == "second answer"
    streamed = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in lines
        if line.startswith("data: {")
    )
    assert "second answer" not in streamed
    final = json.loads(lines[-2][6:])
    assert final["hermes"]["kind"] == "interrupted" and lines[-1] == "data: [DONE]"
    assert second["id"] not in "".join(lines)


def test_overtaken_waiting_request_gets_an_interrupted_marker(
    gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    fake.push(text("slow first", delay=3), text("quick second"))
    result: dict[str, Any] = {}

    def first() -> None:
        result.update(gateway.chat("one", user="overlap-2").json())

    waiter = threading.Thread(target=first, daemon=True)
    waiter.start()
    wait_until(lambda: len(fake.requests) == 1)
    second = gateway.chat("two", user="overlap-2").json()
    waiter.join(20)
    assert second["choices"][0]["message"]["content"] == "quick second"
    assert result["hermes"]["kind"] == "interrupted"
    assert result["choices"][0]["message"]["content"] == ""
    assert result["id"] != second["id"]


def test_without_user_the_clients_messages_are_the_history(
    client: openai.OpenAI, gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "my name is Ann"},
        {"role": "assistant", "content": "Ahoy Ann"},
        {"role": "user", "content": "what is my name?"},
    ]
    client.chat.completions.create(model="m", messages=messages)
    client.chat.completions.create(model="m", messages=_say("who else was here?"))
    first, second = (r["messages"] for r in fake.requests)
    assert [m["content"] for m in first[1:]] == [m["content"] for m in messages]
    assert "Ann" not in json.dumps(second)  # another stateless client sees none of it
    assert gateway.history("default") == []


def test_an_image_only_message_is_accepted(client: openai.OpenAI, fake: FakeOpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    done = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": [image]}], user="conf-img"
    )
    assert done.choices[0].message.content
    assert "[attached image 1]" in fake.requests[0]["messages"][-1]["content"]


def test_a_client_leaving_mid_stream_and_refused_requests_log_one_info_line(
    gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    fake.push(text("part " * 40, chunk_size=5, chunk_delay=0.1))
    url = f"{gateway.url}/v1/chat/completions"
    body = {"user": "leaver", "stream": True, "messages": _say("go")}
    with httpx.stream("POST", url, json=body, timeout=30) as r:
        for line in r.iter_lines():
            if "part" in line:
                break  # and the connection closes
    assert httpx.post(url, json={"messages": []}, timeout=10).status_code == 400
    huge = {"user": "big", "messages": _say("x" * 200_000)}
    assert httpx.post(url, json=huge, timeout=10).status_code == 413

    def logged() -> list[dict[str, Any]]:
        return gateway.log_events()

    def seen() -> set[str]:  # the log is written off the loop: wait for it
        return {e["event"] for e in logged()} | {str(e.get("status")) for e in logged()}

    wait_until(lambda: {"api.client_gone", "413"} <= seen(), timeout=20)
    events = logged()
    gone = [e for e in events if e["event"] == "api.client_gone"]
    assert gone[0]["session_key"] == "api:dm:leaver" and gone[0]["level"] == "info"
    assert not [e for e in events if e["event"] == "control.handler_failed"]
    rejected = [e for e in events if e["event"] == "control.rejected"]
    assert {e["status"] for e in rejected} >= {400, 413}
    assert all(e["level"] == "info" and e["reason"] for e in rejected)


def test_two_clients_with_the_same_idempotency_key_get_their_own_answers(
    gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    fake.push(text("for alice", delay=1.5))
    url = f"{gateway.url}/v1/chat/completions"
    headers = {"Idempotency-Key": "same-key"}
    result: dict[str, Any] = {}

    def alice() -> None:
        body = {"user": "idem-a", "messages": _say("alice asks")}
        result.update(httpx.post(url, json=body, headers=headers, timeout=30).json())

    first = threading.Thread(target=alice, daemon=True)
    first.start()
    wait_until(lambda: len(fake.requests) == 1)
    body = {"user": "idem-b", "messages": _say("bob asks")}
    bob = httpx.post(url, json=body, headers=headers, timeout=30)
    first.join(20)
    assert bob.status_code == 200
    assert bob.json()["choices"][0]["message"]["content"] == "echo: bob asks"
    assert result["choices"][0]["message"]["content"] == "for alice"


def test_a_session_header_keeps_the_history_like_user(
    client: openai.OpenAI, gateway: GatewayProcess, fake: FakeOpenAI
) -> None:
    header = {"X-Hermes-Session": "hdr-session"}
    ignored = {"role": "user", "content": "an earlier turn the gateway does not need"}
    for said in ("first", "second"):
        client.chat.completions.create(
            model="m", messages=[ignored, *_say(said)], extra_headers=header
        )
    contents = [m["content"] for m in gateway.history("hdr-session")]
    assert contents == ["first", "echo: first", "second", "echo: second"]
    assert "does not need" not in json.dumps(fake.requests)  # only the new message is used
