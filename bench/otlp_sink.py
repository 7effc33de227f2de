"""``python -m bench.otlp_sink``: a local OTLP/HTTP collector for the traces bench. It takes
every export (read, not decoded: its own CPU stays small and off the gateway's), answers an
empty ExportTraceServiceResponse, and prints ``READY <endpoint>`` once it listens."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web


async def _serve() -> None:
    exports = {"requests": 0, "bytes": 0}

    async def export(request: web.Request) -> web.Response:
        exports["requests"] += 1
        exports["bytes"] += len(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def stats(_request: web.Request) -> web.Response:
        return web.json_response(exports)

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/traces", export)
    app.router.add_get("/_stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    print(f"READY http://127.0.0.1:{sock.getsockname()[1]}/v1/traces", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve())
