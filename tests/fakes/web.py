"""A fake web for the web tools: pages, redirects, a big page, and a SearXNG-style JSON search.

Tests reach it on 127.0.0.1, which the SSRF guard refuses unless the config allows loopback:
the allowlist is part of every test that fetches from it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer

ARTICLE = """<!doctype html><html><head><title>Tide tables</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Tide tables for Brest</h1>
<p>High tide on Monday is at 06:42 with a coefficient of 95, the highest this month, so
the old harbour floods its lower quay for about an hour.</p>
<p>Read the <a href="/method">method</a> behind these <b>predictions</b> before sailing.</p>
<table><tr><th>Day</th><th>High</th></tr><tr><td>Mon</td><td>06:42</td></tr></table>
</article><footer>(c) harbour office</footer>
<script>var tracking = "do not show this";</script></body></html>"""


class FakeWeb(FakeServer):
    """Routes: /article, /plain, /json, /big, /binary, /redirect?to=URL, /search?q=&format=json."""

    def __init__(self) -> None:
        super().__init__()
        self.searches: list[dict[str, str]] = []
        self.hits: list[str] = []
        self.search_results: list[dict[str, Any]] = [
            {"url": "https://example.org/tides", "title": "Tides", "content": "Tide tables."},
            {"url": "https://example.org/moon", "title": "Moon  phases", "content": ""},
            {"title": "no url: skipped"},
        ]
        r = self.app.router
        r.add_get("/article", self._page(ARTICLE, "text/html"))
        r.add_get("/plain", self._page("just text\nline two", "text/plain"))
        r.add_get("/json", self._page('{"a": 1}', "application/json"))
        r.add_get("/binary", self._binary)
        r.add_get("/big", self._big)
        r.add_get("/redirect", self._redirect)
        r.add_get("/missing", self._missing)
        r.add_get("/search", self._search)

    def _page(self, body: str, kind: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            self.hits.append(request.path)
            return web.Response(text=body, content_type=kind)

        return handler

    async def _binary(self, request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")

    async def _big(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        try:
            for _ in range(64):  # 4 MiB
                await resp.write(b"x" * 65536)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client stopped reading at its cap
        return resp

    async def _redirect(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        raise web.HTTPFound(request.query["to"])

    async def _missing(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="nope")

    async def _search(self, request: web.Request) -> web.Response:
        self.searches.append(dict(request.query))
        if request.query.get("format") != "json":
            return web.Response(status=403, text="format not allowed")
        return web.json_response({"query": request.query.get("q"), "results": self.search_results})
