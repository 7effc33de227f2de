"""OpenTelemetry traces through `hermes gateway run`: a test OTLP/HTTP receiver gets the span
tree of a message with one tool call (names, parent links, attributes, no message text), and a
collector that is down delays no answer while its lost spans are counted in /metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess, free_port
from tests.fakes.openai import FakeOpenAI, error, text, tool_calls
from tests.fakes.otlp import Receiver
from tests.fakes.otlp import attrs as _attrs

pytest.importorskip("opentelemetry.sdk")
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

SECRET = "trace-header-secret-42"
PRIVATE = "my private words about the zebra"
QUERY = "zebra query words"
ANSWER = "the final answer text"


def _gateway(
    tmp_path: Path, fake_llm: FakeOpenAI, traces: dict[str, Any], retries: int = 0
) -> GatewayProcess:
    model = {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": retries}
    config = {"model": model, "observability": {"traces": {"enabled": True, **traces}}}
    return GatewayProcess(tmp_path / "home", config, {"TRACE_TOKEN": SECRET})


def _wait_for(receiver: Receiver, names: set[str], timeout: float = 30) -> dict[str, list[Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = receiver.named()
        if names <= found.keys() and len(found.get("model.call", [])) >= 2:
            return found
        time.sleep(0.1)
    raise AssertionError(f"spans missing: {names - receiver.named().keys()}")


def test_a_message_with_a_tool_call_exports_its_span_tree(
    tmp_path: Path, fake_llm: FakeOpenAI, receiver: Receiver
) -> None:
    traces = {
        "endpoint": receiver.endpoint,
        "headers": {"x-collector-token": "${TRACE_TOKEN}"},
        "schedule_delay_s": 0.1,
        "service_name": "hermes-under-test",
        "resource": {"deployment.environment": "e2e"},
    }
    gateway = _gateway(tmp_path, fake_llm, traces, retries=1)
    fake_llm.push(
        error(503, retry_after=0.05),  # the first call's one retry
        tool_calls(("session_search", {"query": QUERY})),
        text(ANSWER, delay=0.3),  # its first token comes 300 ms after the request
    )
    try:
        gateway.start()
        reply = gateway.chat(PRIVATE).json()
        assert reply["choices"][0]["message"]["content"] == ANSWER
        names = {"message", "admission", "inbox.write", "run", "pool.wait", "model.call"}
        spans = _wait_for(receiver, names | {"tool.call", "reply.send"})
        events = gateway.log_events()
    finally:
        gateway.kill()
    (message,) = spans["message"]
    (run,) = spans["run"]
    (tool,) = spans["tool.call"]
    (reply_send,) = spans["reply.send"]
    assert message.parent_span_id == b""
    for child in [*spans["admission"], *spans["inbox.write"], run]:
        assert child.parent_span_id == message.span_id and child.trace_id == message.trace_id
    for child in [*spans["model.call"], *spans["pool.wait"], tool, reply_send]:
        assert child.parent_span_id == run.span_id and child.trace_id == message.trace_id
    assert _attrs(message)["hermes.message.chars"] == len(PRIVATE)
    assert _attrs(message)["hermes.platform"] == "api"
    assert len(_attrs(message)["hermes.session.hash"]) == 16
    assert _attrs(run)["hermes.run.status"] == "done"
    tool_attrs = _attrs(tool)
    bytes_out = tool_attrs.pop("hermes.tool.bytes_out")
    assert tool_attrs == {"hermes.tool.tool": "session_search", "hermes.tool.ok": True}
    assert isinstance(bytes_out, int) and bytes_out > 0
    calls = sorted(spans["model.call"], key=lambda s: _attrs(s)["hermes.model.finish_reason"])
    assert [_attrs(s)["hermes.model.retries"] for s in calls] == [0, 1]  # stop, tool_calls
    ttft_ms = [_attrs(s)["hermes.model.ttft_ms"] for s in calls]
    assert ttft_ms[0] >= 250
    duration_ms = (calls[0].end_time_unix_nano - calls[0].start_time_unix_nano) / 1e6
    assert ttft_ms[0] <= duration_ms + 1  # within the call (ttft is rounded to the ms)
    assert {_attrs(s)["hermes.model.outcome"] for s in spans["model.call"]} == {"ok"}
    finishes = sorted(_attrs(s)["hermes.model.finish_reason"] for s in spans["model.call"])
    assert finishes == ["stop", "tool_calls"]
    assert all(_attrs(s)["hermes.model.model"] for s in spans["model.call"])
    resource = {kv.key: kv.value.string_value for kv in receiver.spans[0][0].attributes}
    assert resource["service.name"] == "hermes-under-test"
    assert resource["deployment.environment"] == "e2e"
    assert all(h.get("x-collector-token") == SECRET for h in receiver.headers)
    # no message text, tool argument, answer, session key or secret in any attribute
    with receiver.lock:
        everything = " ".join(str(_attrs(s)) + s.name for _r, s in receiver.spans)
    for words in (PRIVATE, "zebra", QUERY, ANSWER, SECRET, "api:"):
        assert words not in everything
    # the tool's log line carries its run's trace
    (logged,) = [e for e in events if e.get("event") == "tool.call"]
    assert logged["trace_id"] == message.trace_id.hex()
    assert logged["span_id"] == run.span_id.hex()


def test_a_collector_down_delays_no_answer_and_its_spans_are_counted(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    traces = {"endpoint": closed, "schedule_delay_s": 0.1, "queue_max": 2, "batch_max": 1}
    traces["export_timeout_s"] = 30  # a wait on the collector would outlast the chat's timeout
    gateway = _gateway(tmp_path, fake_llm, traces)
    try:
        gateway.start()
        for n in range(3):
            fake_llm.push(tool_calls(("session_search", {"query": QUERY})), text(f"answer {n}"))
            reply = gateway.chat(PRIVATE, timeout=20).json()
            assert reply["choices"][0]["message"]["content"] == f"answer {n}"
        metrics = httpx.get(f"{gateway.url}/metrics", headers=gateway.operator, timeout=10).text
    finally:
        gateway.kill()
    dropped = [line for line in metrics.splitlines() if line.startswith("hermes_trace_spans_total")]
    counts = {line.split('"')[1]: float(line.split()[-1]) for line in dropped}
    assert counts.get("dropped", 0) > 0, metrics[-3000:]
