"""The browser the `browser_*` tools drive: Playwright's async API on an event loop of its own
thread, started on the first call; one context per session, bounded in number and age; the
process ends when no session has used it for a while. Tool threads call `BrowserPool.browse`
and wait with the call's deadline; a call past it is cancelled and its session's page closed.
Why a thread of its own and not Playwright's sync API: docs/browser.md."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from hermes_gateway.browser.pages import act
from hermes_gateway.browser.socks import GuardedSocks
from tools import sandbox
from tools.builtin import BrowserToolConfig
from tools.errors import ToolError
from tools.host import BrowserRequest, BrowserResult
from tools.ssrf import SsrfGuard

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = structlog.get_logger("hermes.browser")
_SWEEP_S = 2.0
LAUNCH_TIMEOUT_S = 60.0  # the browser's start, once (a loaded machine takes seconds)
# flags on top of Playwright's: no UDP past the proxy (QUIC, WebRTC), no background traffic
_ARGS = (
    "--disable-quic",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--dns-prefetch-disable",
    "--no-pings",
)


@dataclass(eq=False)
class _Session:
    context: BrowserContext
    page: Page
    socks: GuardedSocks
    started: float = field(default_factory=time.monotonic)
    used: float = field(default_factory=time.monotonic)

    def touch(self) -> None:
        self.used = time.monotonic()

    def follow(self, page: Page) -> None:
        """A page the site opens (target=_blank, window.open) is the one the tools act on."""
        self.page = page


class BrowserPool:
    """One Chromium for every session of this gateway, owned by one thread."""

    def __init__(self, settings: BrowserToolConfig) -> None:
        self.settings = settings
        self.guard = SsrfGuard(allowed_networks=settings.allowed_networks)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # the rest is touched on the browser's loop only
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._sessions: dict[str, _Session] = {}
        self._starting: asyncio.Lock | None = None
        self._idle_since = time.monotonic()
        self._calls = 0  # calls in flight
        self._scratch: Path | None = None  # the walled Chromium's folder, while it runs
        self.walled = False  # whether the running Chromium is inside the tool walls

    # -- on tool threads ----------------------------------------------------------------

    def browse(self, request: BrowserRequest, should_stop: Callable[[], bool]) -> BrowserResult:
        """Run ``request`` on the browser's loop; wait at most the call's timeout (the
        browser's start, on a first call, has a bound of its own: `LAUNCH_TIMEOUT_S`)."""
        loop = self._running_loop()
        if request.action != "close":
            starting = asyncio.run_coroutine_threadsafe(self._started(), loop)
            late = f"the browser did not start within {LAUNCH_TIMEOUT_S:g} s"
            self._wait(starting, LAUNCH_TIMEOUT_S, should_stop, request.session_key, late)
        future = asyncio.run_coroutine_threadsafe(self._browse(request), loop)
        timeout_s = self.settings.timeout_s
        late = f"the page did not answer within {timeout_s:g} s; it was closed"
        result: BrowserResult = self._wait(
            future, timeout_s, should_stop, request.session_key, late
        )
        return result

    def _wait(
        self,
        future: concurrent.futures.Future[Any],
        timeout_s: float,
        should_stop: Callable[[], bool],
        session_key: str,
        late: str,
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return future.result(0.1)
            except concurrent.futures.TimeoutError:
                pass
            if should_stop():
                self._abandon(future, session_key)
                raise ToolError("interrupted by the user; the page was closed")
            if time.monotonic() > deadline:
                self._abandon(future, session_key)
                raise ToolError(f"{late} (browser_navigate opens a new page)")

    def _abandon(self, future: concurrent.futures.Future[Any], session_key: str) -> None:
        future.cancel()
        self.end_session(session_key)

    def end_session(self, session_key: str) -> None:
        """Close the session's context (its cookies and storage go with it); no wait."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._end(session_key), loop)

    def sessions(self) -> int:
        """How many sessions have a context now (tests, metrics)."""
        loop = self._loop
        if loop is None:
            return 0
        future = asyncio.run_coroutine_threadsafe(self._count(), loop)
        return future.result(10)

    def running(self) -> bool:
        """Whether a browser process is up now."""
        loop = self._loop
        if loop is None:
            return False
        return bool(asyncio.run_coroutine_threadsafe(self._up(), loop).result(10))

    def probe(self) -> str:
        """Start the browser (`hermes doctor`): its version and how long the start took."""
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(self._started(), self._running_loop())
        browser = future.result(self.settings.timeout_s)
        where = "inside the tool walls" if self.walled else "NOT inside the tool walls"
        return f"{browser.version} started in {time.monotonic() - started:.1f} s, {where}"

    def close(self, timeout_s: float = 15.0) -> None:
        """End every session, the browser and the thread (blocking: not on an event loop)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("browser.close_failed", error=str(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(
                    target=_run_loop, args=(loop, started), name="hermes-browser", daemon=True
                )
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
                asyncio.run_coroutine_threadsafe(self._sweeper(), loop)
            return self._loop

    # -- on the browser's loop ----------------------------------------------------------

    async def _count(self) -> int:
        return len(self._sessions)

    async def _up(self) -> bool:
        return self._browser is not None

    async def _browse(self, request: BrowserRequest) -> BrowserResult:
        self._calls += 1  # the sweeper leaves a browser with a call in flight alone
        try:
            return await self._act(request)
        finally:
            self._calls -= 1
            self._idle_since = time.monotonic()

    async def _act(self, request: BrowserRequest) -> BrowserResult:
        if request.action == "close":
            closed = await self._end(request.session_key)
            return BrowserResult("Closed the page." if closed else "No page was open.")
        session = await self._session(request.session_key, create=request.action == "navigate")
        if session is None:
            raise ToolError("no page is open: call browser_navigate first")
        session.touch()
        seen = len(session.socks.refusals)
        try:
            result = await act(session.page, request, self.settings.max_snapshot_chars)
        except ToolError as exc:
            raise ToolError(_with_refusals(str(exc), session.socks.refusals[seen:])) from None
        except Exception as exc:  # Playwright's errors: a bad ref, a failed navigation
            text = _first_line(str(exc)) or type(exc).__name__
            raise ToolError(_with_refusals(text, session.socks.refusals[seen:])) from None
        finally:
            session.touch()
        refused = session.socks.refusals[seen:]
        return (
            BrowserResult(_with_refusals(result.text, refused), result.image) if refused else result
        )

    async def _session(self, key: str, *, create: bool) -> _Session | None:
        session = self._sessions.get(key)
        if session is not None and not session.page.is_closed():
            return session
        if session is not None:
            await self._end(key)
        if not create:
            return None
        browser = await self._started()
        while len(self._sessions) >= self.settings.max_sessions:
            oldest = min(self._sessions, key=lambda k: self._sessions[k].used)
            await self._end(oldest)
        socks = GuardedSocks(self._pin)
        port = await socks.start()
        context = await browser.new_context(
            proxy={"server": f"socks5://127.0.0.1:{port}", "bypass": "<-loopback>"},
            service_workers="block",
            accept_downloads=False,
        )
        # past the call's own deadline: that one decides, and closes the page as it does
        context.set_default_timeout((self.settings.timeout_s + 5) * 1000)
        page = await context.new_page()
        session = _Session(context, page, socks)
        context.on("page", session.follow)
        self._sessions[key] = session
        log.info("browser.session_opened", session_key=key, sessions=len(self._sessions))
        return session

    def _pin(self, host: str, port: int) -> str:
        return self.guard.pin(httpx.URL(scheme="http", host=host, port=port))

    async def _started(self) -> Browser:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._browser is None or not self._browser.is_connected():
                self._browser = await self._launch()
            return self._browser

    async def _launch(self) -> Browser:
        from playwright.async_api import async_playwright  # only once a browser tool is used

        started = time.monotonic()
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        loop = asyncio.get_running_loop()
        executable = await loop.run_in_executor(None, self._walled_executable)
        # Chromium's own sandbox refuses to start as root, and inside the walls it is root of
        # its user namespace; the walls stand in for it there (docs/browser.md)
        walled = executable != self.settings.executable
        no_sandbox = walled or os.geteuid() == 0
        browser = await self._playwright.chromium.launch(
            executable_path=executable,
            args=[*_ARGS, *(["--no-sandbox"] if no_sandbox else [])],
            # every context names its own proxy; this one refuses whatever reaches it
            proxy={"server": "socks5://127.0.0.1:9", "bypass": "<-loopback>"},
        )
        self.walled = walled
        self._idle_since = time.monotonic()  # the call that started it is on its way
        log.info("browser.started", seconds=round(time.monotonic() - started, 3), walled=walled)
        return browser

    def _walled_executable(self) -> str:
        """A script that starts Chromium inside the tool walls (the home hidden, writes only to
        a folder of its own and a private /tmp), or Chromium itself where no namespace can be
        built. Blocking: the first probe of the walls starts a process."""
        self._drop_scratch()
        folder = Path(tempfile.mkdtemp(prefix="hermes-browser-"))
        work = folder / "work"
        work.mkdir()
        argv = sandbox.walled_command([self.settings.executable], work, network="host")
        if argv is None:
            shutil.rmtree(folder, ignore_errors=True)
            log.warning("browser.unwalled", reason="no namespace can be built on this machine")
            return self.settings.executable
        script = folder / "chromium"
        script.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
        script.chmod(0o700)
        self._scratch = folder
        return str(script)

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    async def _end(self, key: str) -> bool:
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        self._idle_since = time.monotonic()
        try:
            await asyncio.wait_for(session.context.close(), 10)
        except Exception as exc:  # a crashed browser: the context is gone with it
            log.warning("browser.context_close_failed", error=str(exc))
        await session.socks.close()
        log.info("browser.session_closed", session_key=key, sessions=len(self._sessions))
        return True

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            await self._sweep(time.monotonic())

    async def _sweep(self, now: float) -> None:
        s = self.settings
        for key, session in list(self._sessions.items()):
            if now - session.used > s.session_idle_s or now - session.started > s.session_max_s:
                await self._end(key)
        quiet = not self._sessions and not self._calls
        idle = quiet and now - self._idle_since > s.idle_close_s
        if self._browser is not None and idle:
            await self._stop_browser()

    async def _stop_browser(self) -> None:
        browser, playwright = self._browser, self._playwright
        self._browser = self._playwright = None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), 10)
            except Exception as exc:
                log.warning("browser.close_failed", error=str(exc))
        if playwright is not None:
            await playwright.stop()
        await asyncio.get_running_loop().run_in_executor(None, self._drop_scratch)
        log.info("browser.stopped")

    async def _shutdown(self) -> None:
        for key in list(self._sessions):
            await self._end(key)
        await self._stop_browser()


def _run_loop(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    try:
        loop.run_forever()
    finally:  # the sweeper and any pipe still open end with the loop
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:500] if lines else ""


def _with_refusals(text: str, refusals: list[str]) -> str:
    if not refusals:
        return text
    shown = "; ".join(dict.fromkeys(refusals))[:1000]
    return f"{text}\nThe SSRF guard refused the page's connection: {shown}"
