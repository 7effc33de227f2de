"""The floor: the least a Telegram -> LLM -> Telegram pipeline of the gateway's shape can cost.

python-telegram-bot 22 long polling on uvloop -> one handler -> `run_in_executor` (a pool of
`--workers` threads) running one sync openai-SDK call with just the message text ->
`bot.send_message`. No sessions, history, store, typing, access rules or logging.

Run as its own process: ``python -m bench.floor --telegram URL --openai URL [--workers 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import uvloop
from telegram import Update
from telegram.ext import Application, ApplicationBuilder, ContextTypes, MessageHandler, filters

POLL_TIMEOUT = 10  # getUpdates long-poll wait, seconds


def build(
    telegram_url: str, token: str, llm_url: str, workers: int
) -> Application[Any, Any, Any, Any, Any, Any]:
    """The PTB application with its one handler; `telegram_url` is the fake's root URL."""
    llm = openai.OpenAI(base_url=llm_url, api_key="sk-fake", max_retries=0, timeout=30)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="floor-llm")

    def complete(text: str) -> str:
        response = llm.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
        )
        return response.choices[0].message.content or "(empty)"

    async def on_text(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or message.text is None:
            return
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(pool, complete, message.text)
        await context.bot.send_message(message.chat_id, reply)

    app = (
        ApplicationBuilder()
        .token(token)
        .base_url(f"{telegram_url}/bot")
        .base_file_url(f"{telegram_url}/file/bot")
        # Like the gateway, every update is handled concurrently (PTB's default is one at a time;
        # `True` means at most 256 at once, which a larger pool must not be held to).
        .concurrent_updates(max(256, workers))
        .build()
    )
    app.add_handler(MessageHandler(filters.TEXT, on_text))
    app.bot_data["pool"] = pool
    return app


async def serve(telegram_url: str, token: str, llm_url: str, workers: int) -> None:
    app = build(telegram_url, token, llm_url, workers)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0, timeout=POLL_TIMEOUT)
    print("READY", flush=True)
    await stop.wait()
    await app.updater.stop()
    await app.stop()
    await app.shutdown()
    app.bot_data["pool"].shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--telegram", required=True, help="the fake Bot API's root URL")
    parser.add_argument("--token", default="123:ABC")
    parser.add_argument("--openai", required=True, help="the fake OpenAI base URL (…/v1)")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.telegram, args.token, args.openai, args.workers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
