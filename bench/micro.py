"""Micro-benchmarks behind the profile's biggest rows (bench/README.md), each against the
alternative it suggests: ``python -m bench.micro [store] [llm] [telegram] [-n N]``.

- store: the gateway's three hot-path transactions per message through `Store`, and the same
  statements on plain `sqlite3`;
- llm: `LLMClient.complete` streaming and not (CPU of the calling thread, new TCP
  connections), and a hand-rolled SSE read to the end of the body;
- telegram: one `sendMessage` through PTB (floor-style, gateway-style, `do_api_request`) and
  as a raw aiohttp POST, against the fake Bot API in its own process.
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

Row = tuple[str, float, str]  # (what, ms per message or call, note)


def _event(i: int) -> Any:
    from hermes_gateway.events import MessageEvent

    return MessageEvent(
        platform="telegram",
        chat_type="dm",
        chat_id=str(i),
        user_id=str(i),
        message_id=str(i),
        text=f"ping {i}",
        session_key=f"telegram:dm:{i % 50}",
        received_at=time.time(),
    )


async def _store_gateway(path: Path, n: int) -> float:
    from hermes_gateway.store.store import Store

    store = Store(f"sqlite+aiosqlite:///{path}")
    await store.open()
    try:
        started = time.process_time()
        for i in range(n):
            ev = _event(i)
            inbox_id = await store.accept(ev)
            assert inbox_id is not None  # a new message, never a redelivery here
            turn = [{"role": "user", "content": ev.text}, {"role": "assistant", "content": "ok"}]
            await store.complete_turn(ev.session_key, turn, [inbox_id], "ok", f"run{i}")
            await store.mark([inbox_id], "answered", reply="ok")
        return (time.process_time() - started) / n * 1000
    finally:
        await store.close()


def _store_plain(path: Path, n: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE inbox(id INTEGER PRIMARY KEY, key, payload, status, reply, at)")
    db.execute("CREATE TABLE msg(id INTEGER PRIMARY KEY, session, role, content, at)")
    started = time.process_time()
    for i in range(n):
        now, text = time.time(), f"ping {i}"
        with db:  # one transaction each, like the gateway's three
            db.execute("BEGIN")
            cur = db.execute(
                "INSERT INTO inbox(key, payload, status, at) VALUES (?, ?, 'accepted', ?)",
                (str(i), json.dumps({"text": text}), now),
            )
        inbox_id = cur.lastrowid
        with db:
            db.execute("BEGIN")
            rows = [(i % 50, "user", text, now), (i % 50, "assistant", "ok", now)]
            db.executemany("INSERT INTO msg(session, role, content, at) VALUES (?,?,?,?)", rows)
            db.execute("UPDATE inbox SET status='done', reply='ok' WHERE id=?", (inbox_id,))
        with db:
            db.execute("BEGIN")
            db.execute("UPDATE inbox SET status='answered', at=? WHERE id=?", (now, inbox_id))
    db.close()
    return (time.process_time() - started) / n * 1000


def store(n: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        gateway = uvloop.run(_store_gateway(Path(tmp) / "a.db", n))
        plain = _store_plain(Path(tmp) / "b.db", n)
    note = "process CPU, 3 transactions per message"
    return [
        ("store: Store (its owned SQLite writer)", gateway, note),
        ("store: sqlite3", plain, note),
    ]


@contextmanager
def _connections() -> Iterator[list[int]]:
    count = [0]
    original = socket.create_connection

    def counting(*args: Any, **kwargs: Any) -> socket.socket:
        count[0] += 1
        return original(*args, **kwargs)

    socket.create_connection = counting
    try:
        yield count
    finally:
        socket.create_connection = original


def _timed(fn: Callable[[], object], n: int) -> tuple[float, int]:
    fn()  # warm: connection, lazy imports
    with _connections() as count:
        started = time.thread_time()
        for _ in range(n):
            fn()
        return (time.thread_time() - started) / n * 1000, count[0]


def llm(n: int) -> list[Row]:
    from agent_core.llm import LLMClient, LLMSettings
    from tests.fakes.openai import FakeOpenAI

    rows: list[Row] = []
    messages = [{"role": "user", "content": "hi"}]
    with FakeOpenAI() as fake:
        for stream in (True, False):
            settings = LLMSettings(fake.base_url, "sk-fake", "m", stream=stream)
            client = LLMClient(settings)

            def call(c: LLMClient = client) -> object:
                return c.complete(messages)

            ms, conns = _timed(call, n)
            rows.append((f"llm: LLMClient, stream={stream}", ms, f"{conns} new connections"))
            client.close()
        body = {"model": "m", "messages": messages, "stream": True}
        with httpx.Client(
            base_url=fake.base_url, headers={"Authorization": "Bearer sk-fake"}
        ) as http:

            def by_hand() -> str:
                parts = []
                with http.stream("POST", "/chat/completions", json=body) as resp:
                    for line in resp.iter_lines():  # on past [DONE]: the connection is reused
                        if line.startswith("data: {"):
                            for choice in json.loads(line[6:]).get("choices") or ():
                                parts.append((choice.get("delta") or {}).get("content") or "")
                return "".join(parts)

            ms, conns = _timed(by_hand, n)
            rows.append(("llm: SSE read by hand from httpx", ms, f"{conns} new connections"))
    return [(what, ms, f"calling thread CPU; {note}") for what, ms, note in rows]


async def _telegram(n: int) -> list[Row]:
    from telegram import Bot, ReplyParameters

    from adapters.telegram.http import AiohttpRequest
    from adapters.telegram.sending import Sender
    from bench.procs import TOKEN, start_fake

    with tempfile.TemporaryDirectory() as tmp:
        child, url = start_fake(Path(tmp), "telegram", "fake-telegram")
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{url}/_fake/send_text", json={"chat_id": 42}) as resp:
                    quoted = (await resp.json())["message"]["message_id"]
                bot = Bot(TOKEN, base_url=f"{url}/bot", base_file_url=f"{url}/file/bot")
                await bot.initialize()
                transport = AiohttpRequest()  # the gateway's: PTB on aiohttp
                ours = Bot(TOKEN, base_url=f"{url}/bot", request=transport)
                await ours.initialize()
                sender = Sender(ours, transport)
                raw = {"chat_id": 42, "text": "ok", "parse_mode": "HTML"}
                raw["reply_parameters"] = {
                    "message_id": quoted,
                    "allow_sending_without_reply": True,
                }
                reply = ReplyParameters(quoted, allow_sending_without_reply=True)

                async def post() -> None:
                    async with http.post(f"{url}/bot{TOKEN}/sendMessage", json=raw) as resp:
                        await resp.read()

                calls: dict[str, Callable[[], Awaitable[object]]] = {
                    "PTB send_message(chat, text) (floor)": lambda: bot.send_message(42, "ok"),
                    "PTB + parse_mode, reply_parameters (gateway)": lambda: bot.send_message(
                        42, "ok", parse_mode="HTML", reply_parameters=reply
                    ),
                    "PTB do_api_request, same parameters": lambda: bot.do_api_request(
                        "sendMessage", api_kwargs=raw
                    ),
                    "PTB on aiohttp, send_message as the gateway did": lambda: ours.send_message(
                        42, "ok", parse_mode="HTML", reply_parameters=reply
                    ),
                    "the gateway's Sender.send (a plain call on aiohttp)": lambda: sender.send(
                        "42", "ok", reply_to=str(quoted)
                    ),
                    "raw aiohttp POST, same parameters": post,
                }
                rows = []
                for what, call in calls.items():
                    with warnings.catch_warnings():
                        # PTB warns when do_api_request names a method it has its own for
                        warnings.filterwarnings("ignore", "Please use 'Bot.sendMessage'")
                        await call()
                        started = time.process_time()
                        for _ in range(n):
                            await call()
                    ms = (time.process_time() - started) / n * 1000
                    rows.append(
                        (f"sendMessage: {what}", ms, "process CPU; fake in its own process")
                    )
                await bot.shutdown()
                await ours.shutdown()
                return rows
        finally:
            child.stop()


def telegram(n: int) -> list[Row]:
    return uvloop.run(_telegram(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    suites = {"store": store, "llm": llm, "telegram": telegram}
    parser.add_argument("which", nargs="*", help="store, llm, telegram (default: all)")
    parser.add_argument("-n", type=int, default=300, help="iterations of each")
    args = parser.parse_args(argv)
    if unknown := set(args.which) - set(suites):
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    print("| what | ms | how |\n|---|---|---|")
    for name in args.which or list(suites):
        for what, ms, note in suites[name](args.n):
            print(f"| {what} | {ms:.2f} | {note} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
