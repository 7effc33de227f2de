"""The harness ceiling: a bot that does nothing but echo, on raw aiohttp (no SDK, no model).

Driven like the floor, it shows how many messages per second the driver and the fake Bot API
can move on this machine: if the floor came near that, the harness would be what it measured.
Run as its own process: ``python -m bench.echo --telegram URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

import aiohttp
import uvloop

POLL_TIMEOUT = 10


async def serve(telegram_url: str, token: str) -> None:
    base = f"{telegram_url}/bot{token}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession() as http:

        async def reply(chat_id: int, text: str) -> None:
            body = {"chat_id": chat_id, "text": f"echo: {text}"}
            async with http.post(f"{base}/sendMessage", json=body) as resp:
                await resp.read()

        async def poll() -> None:
            offset = 0
            while True:
                body = {"offset": offset, "timeout": POLL_TIMEOUT}
                async with http.post(f"{base}/getUpdates", json=body) as resp:
                    updates: list[dict[str, Any]] = (await resp.json())["result"]
                for update in updates:
                    offset = update["update_id"] + 1
                    message = update.get("message") or {}
                    task = loop.create_task(reply(message["chat"]["id"], message.get("text", "")))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

        poller = loop.create_task(poll())
        print("READY", flush=True)
        await stop.wait()
        poller.cancel()
        await asyncio.gather(poller, *tasks, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("--telegram", required=True, help="the fake Bot API's root URL")
    parser.add_argument("--token", default="123:ABC")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.telegram, args.token))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
