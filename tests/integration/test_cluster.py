"""Two gateways on one store and one Redis (`cluster.redis_url`), in this test's loop, each with
Telegram pointed at one fake: a message or a `/stop` taken by one instance acts on the run the
other owns; a session whose owner stops renewing is taken over from the inbox, and the old
owner's late answer is refused by the store, so the user gets exactly one reply."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.api.adapter import ApiAdapter
from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.cluster import ownership
from hermes_gateway.core.sessions import Pending
from hermes_gateway.events import Chat, MessageEvent, OutboundMessage
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, last_user_text, text
from tests.fakes.telegram import FakeTelegram
from tests.harness import Client, dm, eventually, make_config
from tests.redis_server import SERVER, RedisProcess, needs_redis

pytestmark = [
    needs_redis,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis server of the test's own, which it stops and starts; stopped at the end."""
    server = RedisProcess(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def fast_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "retry_first", 0.1)


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, redis_url: str = SERVER, **runner: Any
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Instances "a" and "b" (ids unique to the test) sharing one SQLite store."""
    suffix = uuid.uuid4().hex[:8]
    gateways = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            section = {"enabled": True, "token": TOKEN, "allow_all": True}
            section.update(base_url=tg.api_url, base_file_url=tg.file_url)
            config = make_config(
                tmp_path / name,
                llm.base_url,
                platforms={"telegram": section},
                store={"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
                cluster={"redis_url": redis_url, "instance_id": f"{name}-{suffix}", "lease_s": 1},
                runner={"stop_grace_s": 0.5, "drain_timeout_s": 2, **runner},
            )
            gateway = Gateway(config)
            await gateway.startup()
            gateways.append(gateway)
        yield gateways[0], gateways[1]
    finally:
        for gateway in reversed(gateways):
            await gateway.shutdown()


def runs_of(gateway: Gateway) -> list[str]:
    """Records the texts of every run ``gateway``'s runner starts (its own wrapper)."""
    started: list[str] = []
    start = gateway.runner.start

    def recording(items: list[Pending], carried: list[Pending] | None = None) -> Any:
        started.append(" | ".join(p.event.text for p in items))
        return start(items, carried)

    gateway.runner.start = recording  # type: ignore[method-assign]
    return started


def message(chat: int, message_id: int, words: str) -> MessageEvent:
    return dm(str(message_id), words, chat=str(chat))


async def test_stop_taken_by_one_instance_stops_the_run_on_the_owner(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    fake_llm.push(text("a very long answer", delay=20))
    async with cluster(tmp_path, fake_llm, tg) as (a, b):
        ran_a, ran_b = runs_of(a), runs_of(b)
        key = message(chat, 1, "x").session_key
        outcome = await a.reception.submit(message(chat, 1, "write an essay"), durable=True)
        assert outcome == "accepted"
        await eventually(lambda: len(fake_llm.requests) == 1)
        started = time.monotonic()
        assert await b.reception.submit(message(chat, 2, "/stop"), durable=True) == "accepted"
        await eventually(lambda: not a.runner.busy(key), timeout=10)
        stopped_after = time.monotonic() - started
        [reply] = await tg.wait_sent(1, chat_id=chat)
        status = a.vitals.status()["cluster"]
    print(f"/stop across instances took {stopped_after * 1000:.0f} ms")
    assert reply["text"].startswith("Stopped.")
    assert ran_a == ["write an essay"] and ran_b == []  # the run and the stop were a's
    assert status["instance"].startswith("a-") and status["available"] is True


async def test_a_message_taken_by_another_instance_interrupts_the_owners_run(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    fake_llm.push(text(" ".join(f"w{i}" for i in range(200)), chunk_size=3, chunk_delay=0.05))
    async with cluster(tmp_path, fake_llm, tg) as (a, b):
        ran_a, ran_b = runs_of(a), runs_of(b)
        await a.reception.submit(message(chat, 1, "write a long essay"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await b.reception.submit(message(chat, 2, "actually, just say hi"), durable=True)
        replies = await tg.wait_sent(1, chat_id=chat, timeout=10)
    assert [r["text"] for r in replies] == ["echo: actually, just say hi"]
    assert ran_b == []  # b passed its message to the owner; the owner interrupted and merged
    assert len(ran_a) == 1  # the follow-up turn is handed over, not started afresh
    roles = [m["role"] for m in fake_llm.requests[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


async def test_a_paused_owner_is_taken_over_and_its_late_answer_refused(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """a owns the session and stops renewing its lease (paused); b's sweep finds the
    unanswered entry without an owner, takes the lease and answers; a's answer, ready later,
    is refused by the store (stale token), so it never goes out."""
    chat = random.randint(10_000, 99_999)
    fake_llm.push(text("the paused owner's answer", delay=6))
    async with cluster(tmp_path, fake_llm, tg) as (a, b):
        ran_b = runs_of(b)
        key = message(chat, 1, "x").session_key
        await a.reception.submit(message(chat, 1, "hello"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        assert a.ownership is not None
        for task in a.ownership._tasks:  # a's coordination stops: no renewal, as if paused
            task.cancel()
        await eventually(lambda: ran_b, timeout=10)  # b took the session over
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=10)
        await eventually(lambda: not a.runner.busy(key), timeout=15)  # a's late answer came
        await asyncio.sleep(0.5)  # and would have been sent by now
        sent = [m["text"] for m in tg.messages_to(chat)]
        to_run, to_send = await b.store.replayable(3600)
    assert ran_b == ["hello"]
    assert reply["text"] == "echo: hello" and sent == ["echo: hello"]
    assert to_run == [] and to_send == []  # answered once, by b


async def test_with_redis_down_messages_wait_and_are_answered_once_it_is_back(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, redis: RedisProcess
) -> None:
    """No coordination, no run (a session could otherwise run on two instances): the message
    stays in the inbox, /readyz says why, its user is told it waits, and it is answered, once,
    when Redis is back."""
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg, redis.url) as (a, b):
        for gateway in (a, b):
            assert gateway.ownership is not None
            gateway.ownership.tell_waiting_after_s = 0.5  # `cluster.waiting_notice_s`
        ran_a, ran_b = runs_of(a), runs_of(b)
        redis.stop()
        outcome = await a.reception.submit(message(chat, 1, "are you there?"), durable=True)
        assert outcome == "accepted"
        await eventually(lambda: not a.vitals.readiness()[0])
        [notice] = await tg.wait_sent(1, chat_id=chat, timeout=10)
        await asyncio.sleep(1.5)  # longer than a lease: still nothing ran anywhere
        assert ran_a == ran_b == [] and fake_llm.requests == []
        ready, reasons = a.vitals.readiness()
        redis.start()  # empty: no lease, no stream survived
        await tg.wait_sent(2, chat_id=chat, timeout=15)
        await eventually(lambda: a.vitals.readiness()[0] and b.vitals.readiness()[0])
        await asyncio.sleep(1.5)  # a second answer would come within a sweep
        sent = [m["text"] for m in tg.messages_to(chat)]
    assert any("cluster: coordination (Redis) unreachable" in r for r in reasons)
    assert notice["text"] == ownership.WAITING
    assert sent == [ownership.WAITING, "echo: are you there?"]
    assert sorted(ran_a + ran_b) == ["are you there?"]


async def test_a_run_stopped_because_redis_went_down_has_its_user_told(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, redis: RedisProcess
) -> None:
    """Redis goes while a run is in flight: its lease cannot be renewed, so the run stops at
    the deadline and its message waits in the inbox; its user is told, as one whose message
    arrived during the outage is."""
    fake_llm.push(text("too late", delay=8))
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg, redis.url) as (a, _):
        assert a.ownership is not None
        a.ownership.tell_waiting_after_s = 1.5  # `cluster.waiting_notice_s`
        assert await a.reception.submit(message(chat, 1, "a long one"), durable=True) == "accepted"
        await eventually(lambda: len(fake_llm.requests) == 1)
        redis.stop()
        [notice] = await tg.wait_sent(1, chat_id=chat, timeout=10)
        await asyncio.sleep(1.0)
        sent = [m["text"] for m in tg.messages_to(chat)]
    assert notice["text"] == ownership.WAITING
    assert sent == [ownership.WAITING]  # the stopped run sent nothing


async def test_a_message_waiting_behind_one_answered_meanwhile_is_told_too(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, redis: RedisProcess
) -> None:
    """The waiting notice's timer starts with a session's first waiting entry; when that one
    is answered meanwhile (a run that finished as its lease ran out is still delivered), the
    session's later message, still waiting, is what its user is told about."""
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg, redis.url) as (a, _):
        assert a.ownership is not None
        a.ownership.tell_waiting_after_s = 1.5  # `cluster.waiting_notice_s`
        redis.stop()
        assert await a.reception.submit(message(chat, 1, "first"), durable=True) == "accepted"
        [(first, _)] = await a.store.unanswered(older_than_s=0, max_age_s=3600)
        await a.store.mark([first], "answered")  # as its detached run's delivery does
        assert await a.reception.submit(message(chat, 2, "second"), durable=True) == "accepted"
        [notice] = await tg.wait_sent(1, chat_id=chat, timeout=10)
    assert notice["text"] == ownership.WAITING


async def test_an_api_request_for_a_session_running_elsewhere_is_carried_there_and_back(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, redis: RedisProcess
) -> None:
    """The local API's reply can only go back on the request's own connection: a request for
    a session another instance runs is carried to that instance, waits its turn there (the
    API's `queue` policy) and its answer, streamed too, comes back through the instance that
    took it; with coordination down it is refused at once with 503, never left hanging."""
    fake_llm.push(text("the long answer", delay=2))
    fake_llm.push(text("after you", chunk_size=3, chunk_delay=0.05))
    fake_llm.overlaps.clear()
    fake_llm.session_of = lambda body: "ann" if "take your time" in str(body) else None
    async with (
        cluster(tmp_path, fake_llm, tg, redis.url) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        ran_a, ran_b = runs_of(a), runs_of(b)
        on_a = Client(http, f"http://127.0.0.1:{a.control.port}")
        on_b = Client(http, f"http://127.0.0.1:{b.control.port}")
        first = asyncio.create_task(on_a.chat("take your time", user="ann"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        carried = await on_b.chat("me again", user="ann", stream=True)
        answered = await first
        redis.stop()
        down = await on_b.chat("anyone?", user="bob")
    fake_llm.session_of = None
    assert answered["text"] == "the long answer"
    assert carried["status"] == 200 and carried["text"] == "after you", carried
    assert len(carried["shown"]) > 1  # it came in pieces, as the owner streamed it
    assert ran_a == ["take your time"] and ran_b == []  # "me again" was a's next turn
    assert [last_user_text(r) for r in fake_llm.requests] == ["take your time", "me again"]
    assert fake_llm.overlaps == []  # one after the other
    assert down["status"] == 503 and "coordinate" in down["body"]["error"]["message"]


async def test_an_api_request_whose_run_lost_its_lease_is_answered_by_the_next_run(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """a runs ann's request and loses the session's lease mid-run (a renewal refused): the
    run is dropped unwritten, as always, and the request still open on a is answered by the
    session's next run (wherever the lease went), never left waiting."""
    fake_llm.push(text("cut off", delay=3))
    async with (
        cluster(tmp_path, fake_llm, tg) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        on_a = Client(http, f"http://127.0.0.1:{a.control.port}")
        asked = asyncio.create_task(on_a.chat("are you there", user="ann"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        assert a.ownership is not None
        a.ownership.keeping._lose("api:dm:ann", "refused")
        got = await asyncio.wait_for(asked, 20)
    assert got["status"] == 200 and got["text"] == "echo: are you there", got
    # the dropped run, then the one that answered (on a loaded machine a renewal may miss
    # once more and drop that one too: the answer still comes, from the run after it)
    assert 2 <= len(fake_llm.requests) <= 3


async def test_a_reply_computed_by_an_owner_that_died_is_sent_by_the_next_without_a_new_run(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """a's reply is stored but Telegram refuses it, so a offers it again in the background
    and keeps the session meanwhile; then a dies. b takes the session over and sends the
    stored reply: one model call, one message."""
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg) as (a, b):
        key = message(chat, 1, "x").session_key
        tg.fail_next("sendMessage", status=500, times=5)  # every attempt the adapter makes
        await a.reception.submit(message(chat, 1, "hello"), durable=True)
        await eventually(lambda: a.delivery.owes(key), timeout=10)
        await asyncio.sleep(1.5)  # past a lease: still a's, its reply still owed
        assert a.ownership is not None and key in a.ownership.leases
        assert b.ownership is not None and key not in b.ownership.leases
        for task in [*a.ownership._tasks, *a.delivery._later]:  # a dies
            task.cancel()
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=10)
        await asyncio.sleep(1.5)  # a second copy would come within a sweep
        sent = [m["text"] for m in tg.messages_to(chat)]
        to_run, to_send = await b.store.replayable(3600)
    assert reply["text"] == "echo: hello" and sent == ["echo: hello"]
    assert len(fake_llm.requests) == 1  # the stored reply, not a new run
    assert to_run == [] and to_send == []


async def test_a_retry_that_reaches_another_instance_gets_the_first_requests_answer(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """A client whose connection to a broke retries with the same Idempotency-Key, and the
    retry lands on b while a still answers the first: b gets a's answer for it (not 409),
    and the model is asked once. A retry once it was answered gets the stored answer."""
    fake_llm.push(text("the one answer", delay=1.5))
    async with (
        cluster(tmp_path, fake_llm, tg) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        on_a = Client(http, f"http://127.0.0.1:{a.control.port}")
        on_b = Client(http, f"http://127.0.0.1:{b.control.port}")
        first = asyncio.create_task(on_a.chat("only once", user="kim", key="retry-1"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        retried = await on_b.chat("only once", user="kim", key="retry-1")
        answered = await first
        again = await on_b.chat("only once", user="kim", key="retry-1")
    assert answered["status"] == 200 and answered["text"] == "the one answer"
    assert retried["status"] == 200 and retried["text"] == "the one answer", retried
    assert again["status"] == 200 and again["text"] == "the one answer", again
    assert len(fake_llm.requests) == 1


async def test_an_instance_that_ran_a_session_before_sees_the_turns_run_elsewhere_since(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """a answers kim, lets the lease go once idle, b answers kim's next request (and starts
    a new session after it with /new, then one more turn), and a answers again: a's model
    request and its /v1/history hold b's turns, not what a cached before, and a's turn is
    written to the session b started."""
    async with (
        cluster(tmp_path, fake_llm, tg) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        on_a = Client(http, f"http://127.0.0.1:{a.control.port}")
        on_b = Client(http, f"http://127.0.0.1:{b.control.port}")
        key = "api:dm:kim"
        assert a.ownership is not None and b.ownership is not None
        assert (await on_a.chat("one", user="kim"))["text"] == "echo: one"
        await eventually(lambda: not a.ownership.held(key), timeout=10)
        assert (await on_b.chat("two", user="kim"))["text"] == "echo: two"
        seen_on_a = [m["content"] for m in await on_a.history("kim")]
        assert (await on_b.chat("/new", user="kim"))["status"] == 200
        assert (await on_b.chat("three", user="kim"))["text"] == "echo: three"
        await eventually(lambda: not b.ownership.held(key), timeout=10)
        assert (await on_a.chat("four", user="kim"))["text"] == "echo: four"
        on_b_after = [m["content"] for m in await on_b.history("kim")]
    assert seen_on_a == ["one", "echo: one", "two", "echo: two"]
    asked = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] != "system"]
    assert asked == ["three", "echo: three", "four"]  # the new session, as b left it
    assert on_b_after == ["three", "echo: three", "four", "echo: four"]


async def test_what_one_instance_says_unasked_reaches_feeds_open_on_another(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """A scheduled job's answer is sent by whichever instance runs the job; a client may be
    listening to the session's feed on any instance: a's unasked message reaches b's feed."""
    async with (
        cluster(tmp_path, fake_llm, tg) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        api_a, api_b = a.adapters["api"], b.adapters["api"]
        assert isinstance(api_a, ApiAdapter) and isinstance(api_b, ApiAdapter)
        assert a.ownership is not None
        await eventually(lambda: len(a.ownership.instances()) == 2, timeout=15)
        url = f"http://127.0.0.1:{b.control.port}/v1/events"
        async with http.get(url, params={"user": "kim"}) as feed:
            assert feed.status == 200
            await eventually(lambda: len(api_b.feeds) == 1)
            said = OutboundMessage.to(Chat("api", "kim", None, "cron:j1"), "it is 7:30", "reply")
            await api_a.send(said)
            while not (line := (await asyncio.wait_for(feed.content.readline(), 10))).startswith(
                b"data: "
            ):
                pass
    item = json.loads(line[6:])
    assert (item["session"], item["content"]) == ("kim", "it is 7:30")
