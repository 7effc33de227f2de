"""What each browser action does to a page, and the snapshot the model reads after it: the
page's accessibility tree with a ref for each element (`[ref=e12]`), which the next action
names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tools.errors import ToolError
from tools.host import BrowserRequest, BrowserResult

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

_SETTLE_MS = 5000  # how long an action waits for the navigation it may have started


async def act(page: Page, request: BrowserRequest, max_chars: int) -> BrowserResult:
    """Do ``request`` on ``page``; the snapshot after it (a screenshot: the PNG too)."""
    action = request.action
    if action == "navigate":
        await page.goto(checked_url(request.url), wait_until="load")
    elif action == "click":
        await _ref(page, request.ref).click()
        await _settle(page)
    elif action == "type":
        target = _ref(page, request.ref)
        await target.fill(request.text)
        if request.submit:
            await target.press("Enter")
            await _settle(page)
    elif action == "press":
        await page.keyboard.press(request.key)
        await _settle(page)
    elif action == "scroll":
        height = (page.viewport_size or {"height": 720})["height"]
        await page.mouse.wheel(0, height * (0.8 if request.direction == "down" else -0.8))
    elif action == "back":
        if await page.go_back(wait_until="load") is None:
            raise ToolError("there is no earlier page in this tab's history")
    elif action == "screenshot":
        image = await page.screenshot(type="png")
        return BrowserResult(await _header(page), image)
    elif action != "snapshot":
        raise ToolError(f"unknown browser action {action!r}")
    return BrowserResult(await snapshot(page, max_chars))


def checked_url(url: str) -> str:
    """Only http(s) pages are opened: no file:, chrome:, data: or javascript: URLs."""
    url = url.strip()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be opened, not {url[:100]!r}")
    return url


def _ref(page: Page, ref: str) -> Locator:
    ref = ref.strip().removeprefix("ref=").strip("[]")
    if not ref:
        raise ToolError("give the element's ref from the last snapshot, e.g. e12")
    return page.locator(f"aria-ref={ref}")


async def _settle(page: Page) -> None:
    """Wait for a navigation the action started to load; a page that keeps loading is read as
    it stands."""
    try:
        await page.wait_for_load_state("load", timeout=_SETTLE_MS)
    except Exception:  # still loading: the snapshot shows what is there
        pass
    if page.url.split(":", 1)[0] not in ("http", "https", "about"):
        raise ToolError(f"the page went to {page.url[:100]!r}, which is not opened")


async def _header(page: Page) -> str:
    return f"URL: {page.url}\nTitle: {await page.title()}"


async def snapshot(page: Page, max_chars: int) -> str:
    """The page's header and its accessibility tree with refs, cut at ``max_chars``."""
    tree = await page.aria_snapshot(mode="ai")
    if len(tree) > max_chars:
        tree = tree[:max_chars] + f"\n[snapshot cut at {max_chars} characters]"
    return f"{await _header(page)}\n\n{tree}"
