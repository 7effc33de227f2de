"""The control port against clients that hold what they take: idle, half-sent-head and
half-sent-body connections are closed by their deadlines while /healthz keeps answering; open
connections are capped; large bodies do not grow the gateway's memory; a retried
Idempotency-Key gets the first request's answer and does not delay a stop."""

from __future__ import annotations

import json
import resource
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.hostile import rawhttp

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024
CAP = 400
LIMITS = {
    "header_timeout_s": 1,
    "idle_timeout_s": 5,
    "body_timeout_s": 2,
    "max_connections": CAP,
    "max_body_bytes": MIB,
    "max_body_bytes_in_flight": 4 * MIB,
}


def gateway_config(llm: FakeOpenAI) -> dict[str, Any]:
    model = {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0}
    return {"model": model, "control": LIMITS}


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, openai_server: FakeOpenAI
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("limits") / "home", gateway_config(openai_server))
    try:
        yield gw.start()
    finally:
        gw.kill()


def pid(gw: GatewayProcess) -> psutil.Process:
    assert gw.proc is not None
    return psutil.Process(gw.proc.pid)


def healthy(gw: GatewayProcess) -> None:
    assert httpx.get(f"{gw.url}/healthz", timeout=5).status_code == 200


def no_errors(gw: GatewayProcess) -> None:
    time.sleep(0.3)  # the log is written from a queue
    bad = [e for e in gw.log_events() if "exception" in e or e.get("level") == "error"]
    assert bad == []


HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
HALF_BODY = rawhttp.post("/v1/chat/completions", b'{"messages": [')[:-2]  # declares more


def test_idle_and_half_sent_connections_are_closed_while_healthz_answers(
    gateway: GatewayProcess,
) -> None:
    proc = pid(gateway)
    before = proc.num_fds()
    # heads last: their deadline is the shortest
    bodies = [rawhttp.connect(gateway.port, HALF_BODY) for _ in range(110)]
    idle = [rawhttp.connect(gateway.port) for _ in range(110)]
    heads = [rawhttp.connect(gateway.port, HALF_HEAD) for _ in range(110)]
    socks = idle + heads + bodies
    try:
        peak = proc.num_fds()
        began = time.monotonic()
        closed_at: dict[int, float] = {}
        while len(closed_at) < len(socks):
            healthy(gateway)  # throughout the flood
            peak = max(peak, proc.num_fds())
            for i, sock in enumerate(socks):
                if i not in closed_at and rawhttp.closed(sock):
                    closed_at[i] = time.monotonic() - began
            assert time.monotonic() - began < 30, f"{len(socks) - len(closed_at)} still open"
            time.sleep(0.1)
        after = proc.num_fds()
    finally:
        for sock in socks:
            sock.close()
    print(f"\nfds: before {before}, with 330 held {peak}, after {after}")
    assert peak >= before + 200  # the connections were really open at once
    assert after <= before + 5
    # a half-sent head is closed by the head deadline (1 s), before the idle ones (5 s)
    assert max(closed_at[i] for i in range(110, 220)) < min(closed_at[i] for i in range(110))
    no_errors(gateway)


def test_a_half_sent_body_is_answered_408(gateway: GatewayProcess) -> None:
    with rawhttp.connect(gateway.port, HALF_BODY) as sock:
        sock.settimeout(15)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "body_timeout"


def test_connections_over_the_cap_are_refused_at_once(gateway: GatewayProcess) -> None:
    proc = pid(gateway)
    before = proc.num_fds()
    socks = [rawhttp.connect(gateway.port) for _ in range(CAP + 50)]
    try:
        time.sleep(1.5)  # the refused are closed at once; the idle deadline is 5 s
        held = proc.num_fds()
        refused = sum(rawhttp.closed(s) for s in socks)
    finally:
        for sock in socks:
            sock.close()
    print(f"\nfds: before {before}, with {CAP + 50} connected (cap {CAP}) {held}")
    assert refused >= 45
    assert held <= before + CAP + 5
    no_errors(gateway)
    rawhttp.wait_closed([rawhttp.connect(gateway.port, b"")], timeout=15)  # idle: closed
    healthy(gateway)


def _send_large(port: int, size: int, chunked: bool, user: str) -> int | None:
    """POST a valid chat request of ``size`` bytes (declared, or chunked with no length): the
    status, or None when the gateway closed before its answer could be read (it need not read
    the rest)."""
    head = [b"POST /v1/chat/completions HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    head.append(b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode())
    first = b'{"messages": [{"role": "user", "content": "hi"}], "pad": "'
    last = f'", "user": "{user}"}}'.encode()
    piece = b"x" * 65536
    pieces = [first] + [piece] * ((size - len(first) - len(last)) // len(piece))
    pieces += [b"x" * (size - len(first) - len(last) - len(piece) * (len(pieces) - 1)), last]
    try:
        with rawhttp.connect(port, b"\r\n".join(head) + b"\r\n\r\n") as sock:
            sock.settimeout(20)
            try:
                for part in pieces:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # refused early: the answer is already waiting
            data = sock.recv(65536)
    except OSError:
        return None
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_concurrent_large_bodies_keep_memory_bounded(
    gateway: GatewayProcess, fake_llm: FakeOpenAI, chunked: bool
) -> None:
    fake_llm.delay = 3.0  # a body the gateway took stays held while its run lasts
    proc = pid(gateway)
    before = proc.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.02)

    def send(n: int) -> int | None:
        return _send_large(gateway.port, 8 * MIB - 1024, chunked, f"rss-{n}")

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(30) as pool:
            statuses = list(pool.map(send, range(30)))
    finally:
        done.set()
        sampler.join()
    after = proc.memory_info().rss
    print(
        f"\nRSS MiB: before {before / MIB:.0f}, peak {peak[0] / MIB:.0f}, after {after / MIB:.0f}"
    )
    assert peak[0] - before < 100 * MIB
    answered = [s for s in statuses if s is not None]
    assert answered and set(answered) <= {413, 503}, statuses
    healthy(gateway)


def test_a_retried_idempotency_key_gets_the_first_answer_and_stop_is_prompt(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("the one answer", delay=2))
    gw = GatewayProcess(tmp_path / "home", gateway_config(fake_llm)).start()
    body = {"user": "race", "messages": [{"role": "user", "content": "once"}]}
    headers = {"Idempotency-Key": "key-123"}

    def post() -> httpx.Response:
        url = f"{gw.url}/v1/chat/completions"
        return httpx.post(url, json=body, headers=headers, timeout=20)

    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(post)
            time.sleep(0.7)  # the first is in flight: the model takes 2 s
            second = pool.submit(post)
            answers = [first.result(), second.result()]
        began = time.monotonic()
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
        stopped_in = time.monotonic() - began
    finally:
        gw.kill()
    assert [a.status_code for a in answers] == [200, 200]
    texts = [a.json()["choices"][0]["message"]["content"] for a in answers]
    assert texts == ["the one answer", "the one answer"]
    assert len(fake_llm.requests) == 1  # one run for both
    print(f"\nSIGTERM to exit: {stopped_in:.1f} s")
    assert stopped_in < 15


def test_the_cap_fits_under_a_low_open_file_limit(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = gateway_config(fake_llm)
    config["control"] = {**LIMITS, "max_connections": 1000}
    gw = GatewayProcess(tmp_path / "home", config)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # inherited by the gateway only
    try:
        gw.start(wait=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        gw.wait_healthy()
        socks = [rawhttp.connect(gw.port) for _ in range(300)]
        try:
            time.sleep(0.5)  # well inside the idle deadline (5 s)
            held = pid(gw).num_fds()
            refused = sum(rawhttp.closed(s) for s in socks)
        finally:
            for sock in socks:
                sock.close()
        print(f"\nfds with 300 connecting under a limit of 256: {held}, refused {refused}")
        assert held <= 128 + 30 and refused >= 300 - 128
        wait_until(lambda: httpx.get(f"{gw.url}/healthz", timeout=2).status_code == 200)
        assert (
            gw.chat("still here").json()["choices"][0]["message"]["content"] == "echo: still here"
        )
    finally:
        gw.kill()
    events = gw.log_events()
    [lowered] = [e for e in events if e["event"] == "control.max_connections_lowered"]
    assert lowered["used"] == 128
    assert "Too many open files" not in json.dumps(events) + gw.stderr()
    assert [e for e in events if e.get("level") == "error"] == []
