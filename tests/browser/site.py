"""Pages the browser tests serve: a login form and the page behind it, a page JavaScript draws,
links, a redirect and an image pointing at a refused address, a page that never loads; and a
"secret" server on 127.0.0.2, which the guard must keep the browser from."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.fakes.server import FakeServer

SECRET_HOST = "127.0.0.2"  # loopback, but not on the browser's allow-list in these tests


class Site(FakeServer):
    """The pages, on 127.0.0.1 (which the tests put on the guard's allow-list)."""

    def __init__(self, secret_url: str) -> None:
        super().__init__()
        self.secret_url = secret_url
        self.sessions: set[str] = set()
        r = self.app.router
        r.add_get("/", self._home)
        r.add_get("/login", self._login_form)
        r.add_post("/login", self._login)
        r.add_get("/private", self._private)
        r.add_get("/drawn", self._drawn)
        r.add_get("/next", self._next)
        r.add_get("/to-secret", self._to_secret)
        r.add_get("/secret-image", self._secret_image)
        r.add_get("/hang", self._hang)

    async def _home(self, request: web.Request) -> web.Response:
        return _html("<h1>Home</h1><a href='/next'>Go to the next page</a>")

    async def _next(self, request: web.Request) -> web.Response:
        return _html("<h1>Next page</h1><p>You followed the link.</p>")

    async def _login_form(self, request: web.Request) -> web.Response:
        return _html(
            "<h1>Sign in</h1><form method='post' action='/login'>"
            "<label>User <input name='user'></label>"
            "<label>Password <input name='password' type='password'></label>"
            "<button type='submit'>Sign in</button></form>"
        )

    async def _login(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("user") != "ada" or form.get("password") != "lovelace":
            return _html("<h1>Wrong password</h1>", status=403)
        token = f"sid-{len(self.sessions) + 1}"
        self.sessions.add(token)
        response = web.HTTPSeeOther("/private")
        response.set_cookie("sid", token, httponly=True)
        raise response

    async def _private(self, request: web.Request) -> web.Response:
        if request.cookies.get("sid") not in self.sessions:
            return _html("<h1>Not signed in</h1>", status=401)
        return _html("<h1>Account of ada</h1><p>Balance: 42 pieces of eight</p>")

    async def _drawn(self, request: web.Request) -> web.Response:
        return _html(
            "<div id='app'>loading</div><script>setTimeout(() => {"
            "document.getElementById('app').innerHTML ="
            " '<h2>Drawn by script</h2><button>Launch</button>'}, 50)</script>"
        )

    async def _to_secret(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.secret_url)

    async def _secret_image(self, request: web.Request) -> web.Response:
        return _html(f"<h1>With an image</h1><img alt='leak' src='{self.secret_url}'>")

    async def _hang(self, request: web.Request) -> web.Response:
        return _html("<h1>Busy</h1><script>while (true) {}</script>")


def _html(body: str, status: int = 200) -> web.Response:
    page = f"<!doctype html><html><head><title>Test site</title></head><body>{body}</body></html>"
    return web.Response(text=page, content_type="text/html", status=status)


class _Secret(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        _Secret.hits.append(self.path)
        data = b"<h1>internal secret</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def secret_server() -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.2 the browser must never reach: (its URL, the paths it served)."""
    hits: list[str] = []
    handler = type("Secret", (_Secret,), {"hits": hits})
    server = http.server.ThreadingHTTPServer((SECRET_HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{SECRET_HOST}:{server.server_address[1]}/secret", hits
    finally:
        server.shutdown()
        server.server_close()
