"""Model faults: whatever the model endpoint does, the user gets an answer or a clear error
within the configured time, and the session answers the next message normally.

Each case records its outcome for the report (`python -m tests.chaos.report`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.kit import record
from tests.fakes.openai import FakeOpenAI, Response, error, hang, raw, text, tool_calls
from tests.harness import make_config, running_gateway
from tests.security import keys

TIMEOUT_S = 1.0
RETRIES = 1
# every attempt may take the timeout, plus one backoff (at most 0.75 s), plus start-up slack
BOUND_S = TIMEOUT_S * (RETRIES + 1) + 0.75 + 2.5
COMPLETION = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}


def sse(*frames: str) -> Response:
    body = "".join(f"data: {f}\n\n" for f in frames)
    return raw(body, content_type="text/event-stream")


@dataclass(frozen=True)
class Fault:
    name: str
    script: tuple[Response, ...]
    expect: str  # a piece of what the user must be told
    stream: bool = True


BIG = "Z" * 1_000_000
FAULTS = [
    Fault("timeout (no bytes)", (hang(5), hang(5)), "did not answer within 1 s"),
    Fault(
        "timeout (a trickle)",
        (text("y" * 80, chunk_size=1, chunk_delay=0.05),) * 2,
        "did not answer within 1 s",
    ),
    Fault(
        "timeout (stalls mid-stream)",
        (text("abc", chunk_size=1, chunk_delay=3),) * 2,
        "did not answer within 1 s",
    ),
    Fault("429 storm", (error(429, retry_after=0),) * 5, "rate-limited (HTTP 429)"),
    Fault("429 then OK", (error(429, retry_after=0), text("after the storm")), "after the storm"),
    Fault("500", (error(500),) * 3, "unavailable (HTTP 500)"),
    Fault("502 HTML page", (raw("<html>bad gateway</html>", status=502),) * 3, "HTTP 502"),
    Fault("503 then OK", (error(503, retry_after=0), text("back again")), "back again"),
    Fault("401", (error(401),), "rejected the API key"),
    Fault("truncated JSON", (raw('{"id": "x", "choices": [{"mes'),), "could not read", False),
    Fault("not JSON", (raw("Internal nonsense"),), "could not read", False),
    Fault("JSON of the wrong shape", (raw('{"choices": 7}'),), "could not read", False),
    Fault(
        "empty choices",
        (raw(json.dumps({**COMPLETION, "choices": []})),) * 2,
        "empty response",
        False,
    ),
    Fault("truncated stream", (sse('{"choices": [{"delta": {"content": "hal'),), "could not read"),
    Fault("stream of junk", (sse("not json", "[DONE]"),), "could not read"),
    Fault("empty stream", (sse("[DONE]"),) * 2, "empty response"),
    Fault(
        "tool call with invalid JSON arguments",
        (tool_calls(("read_file", "{not json")), text("fixed it")),
        "fixed it",
    ),
    Fault(
        "unknown tool",
        (tool_calls(("launch_rockets", {"n": 3})), text("no such tool, sorry")),
        "no such tool, sorry",
    ),
    Fault("enormous answer (1 MB)", (text(BIG, chunk_size=65536),), BIG[:1000]),
    Fault(
        "enormous tool arguments (1 MB)",
        (tool_calls(("read_file", {"path": BIG}), chunk_size=65536), text("that path was silly")),
        "that path was silly",
    ),
]


# the regressions, plus one of each kind; the rest run in the slow suite
CI = {
    "timeout (a trickle)",
    "timeout (stalls mid-stream)",
    "JSON of the wrong shape",
    "429 storm",
    "500",
    "empty choices",
    "tool call with invalid JSON arguments",
    "unknown tool",
    "enormous answer (1 MB)",
}


@pytest.mark.parametrize(
    "fault",
    [pytest.param(f, id=f.name, marks=[] if f.name in CI else [pytest.mark.slow]) for f in FAULTS],
)
async def test_model_fault_gets_a_clear_answer_and_the_session_goes_on(
    tmp_path: Path, llm: FakeOpenAI, fault: Fault
) -> None:
    config = make_config(
        tmp_path,
        llm.base_url,
        model={
            "api_key": keys.MODEL_KEY,
            "timeout_s": TIMEOUT_S,
            "max_retries": RETRIES,
            "stream": fault.stream,
        },
    )
    async with running_gateway(config) as (gw, client):
        llm.push(*fault.script)
        started = time.monotonic()
        reply = await client.chat("do something", user="faulty")
        seconds = time.monotonic() - started
        llm.reset()  # whatever is left of the script: the model is fine again
        after = await client.chat("are you still there?", user="faulty")
        history = await client.history("faulty")
        status = gw.vitals.status()
    # a failure reaches an API client as an error status (a chat platform gets the text)
    told = reply["text"] if reply["status"] == 200 else reply["body"]["error"]["message"]
    outcome: dict[str, Any] = {
        "kind": reply["kind"],
        "status": reply["status"],
        "told": _short(told),
        "seconds": round(seconds, 2),
        "next_message": "answered" if after["text"] == "echo: are you still there?" else "broken",
    }
    record(f"model_fault_{_slug(fault.name)}", {"fault": fault.name, **outcome})
    timed_out = "did not answer" in fault.expect
    assert reply["status"] in ((504,) if timed_out else (200, 502)), outcome
    assert fault.expect in told, outcome
    assert seconds < BOUND_S, outcome
    assert outcome["next_message"] == "answered"
    assert [m["role"] for m in history][-2:] == ["user", "assistant"]
    assert status["pool"]["busy"] == 0


def _short(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= 90 else f"{text[:60]}... ({len(text)} chars)"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")
