"""An interrupt cuts the model request in flight off (its connection is shut, so the server
sees the client gone at once), and a run past its deadline sends no request at all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from agent_core import RunControl
from agent_core.llm import Completion, LLMClient, LLMSettings
from tests.fakes.openai import FakeOpenAI, hang, text


def eventually_sync(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def client(fake: FakeOpenAI, stream: bool) -> LLMClient:
    settings = LLMSettings(base_url=fake.base_url, api_key="sk-fake", model="m", stream=stream)
    return LLMClient(settings)


def ask(llm: LLMClient, control: RunControl, words: str = "x") -> Completion:
    return llm.complete(
        [{"role": "user", "content": words}],
        should_stop=lambda: control.interrupted,
        wait=control.wait,
        on_stop=control.on_interrupt,
    )


@pytest.mark.parametrize("stream", [True, False])
def test_an_interrupt_shuts_a_hung_request_at_once(fake_llm: FakeOpenAI, stream: bool) -> None:
    fake_llm.session_of = lambda body: "s"  # every request of one "session"
    fake_llm.push(hang(30))
    llm, control = client(fake_llm, stream), RunControl()
    with ThreadPoolExecutor(1) as pool:
        asked: Future[Completion] = pool.submit(ask, llm, control, "hung")
        eventually_sync(lambda: len(fake_llm.requests) == 1)
        cut = time.monotonic()
        control.interrupt()
        out = asked.result(timeout=10)
        took = time.monotonic() - cut
        # the server saw the client go: a next request of the session is no overlap
        assert ask(client(fake_llm, stream), RunControl(), "next").content == "echo: next"
    assert out.interrupted
    assert took < 2.0, f"the hung request held the thread {took:.1f} s after the interrupt"
    assert fake_llm.overlaps == []
    assert len(fake_llm.requests) == 2  # the cut request was not retried


def test_a_stream_cut_off_keeps_what_came_so_far(fake_llm: FakeOpenAI) -> None:
    """The words streamed before the interrupt stay in the answer (the history keeps them
    with the interrupted mark), as when the stream was stopped between two lines."""
    words = " ".join(f"w{i}" for i in range(100))
    fake_llm.push(text(words, chunk_size=3, chunk_delay=0.1))
    llm, control, deltas = client(fake_llm, True), RunControl(), []
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(
            lambda: llm.complete(
                [{"role": "user", "content": "x"}],
                should_stop=lambda: control.interrupted,
                on_delta=deltas.append,
                on_stop=control.on_interrupt,
            )
        )
        eventually_sync(lambda: len(deltas) >= 3)
        control.interrupt()
        out = asked.result(timeout=10)
    assert out.interrupted and out.content.startswith("w0 w1") and out.content != words


def test_a_run_past_its_deadline_sends_no_request(fake_llm: FakeOpenAI) -> None:
    control = RunControl()
    control.expire_at(time.monotonic() - 0.001)
    out = ask(client(fake_llm, True), control)
    assert out.interrupted and control.expired and fake_llm.requests == []


def test_a_cut_after_the_request_ended_leaves_the_pooled_connection_alone(
    fake_llm: FakeOpenAI,
) -> None:
    """The hook is removed when the request ends: a late interrupt must not shut the
    connection the pool has lent to another thread's request since."""
    fake_llm.push(text("first"), text("second", delay=0.5))
    llm, early = client(fake_llm, True), RunControl()
    assert ask(llm, early).content == "first"
    done = threading.Event()
    result: list[Completion] = []

    def second() -> None:
        result.append(ask(llm, RunControl()))
        done.set()

    threading.Thread(target=second).start()
    eventually_sync(lambda: len(fake_llm.requests) == 2)
    early.interrupt()  # the first run's control, long after its request ended
    assert done.wait(10)
    assert result[0].content == "second" and not result[0].interrupted


def test_hooks_follow_a_child_and_run_at_once_when_already_interrupted() -> None:
    parent = RunControl()
    child = parent.child()
    fired: list[str] = []
    remove = child.on_interrupt(lambda: fired.append("child"))
    parent.interrupt()
    assert fired == ["child"] and child.interrupted
    remove()
    parent.interrupt()
    assert fired == ["child"]  # removed from the parent too
    child.on_interrupt(lambda: fired.append("late"))
    assert fired == ["child", "late"]
