"""The `browser_*` tools: a real browser for the model (navigate, read the page as an
accessibility tree with refs, click, type, press, scroll, go back, screenshot, close). Each call
is handed to the gateway's browser (`ToolHost.browse`); this module imports no browser code."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.host import BrowserRequest, BrowserResult
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

_REF = "The element's ref from the last snapshot, e.g. e12."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NavigateArgs(_Args):
    url: str = Field(description="The http(s) URL to open.", min_length=1, max_length=4000)


class NoArgs(_Args):
    pass


class ClickArgs(_Args):
    ref: str = Field(description=_REF, min_length=1, max_length=40)


class TypeArgs(_Args):
    ref: str = Field(description=_REF, min_length=1, max_length=40)
    text: str = Field(description="What to type into it (replaces its content).", max_length=10_000)
    submit: bool = Field(False, description="Press Enter afterwards (submits a form).")


class PressArgs(_Args):
    key: str = Field(
        description="A key or chord, e.g. Enter, Tab, Escape, ArrowDown, Control+A.",
        min_length=1,
        max_length=40,
    )


class ScrollArgs(_Args):
    direction: Literal["down", "up"] = Field("down", description="Which way to scroll.")


class ScreenshotArgs(_Args):
    path: str | None = Field(
        None,
        description="Where in the workspace to save the PNG (default browser/shot-<time>.png); "
        "read it with vision_analyze.",
    )


class _BrowserTool(ModelTool):
    parallel_safe = False  # one page per session: its actions go in order
    action = ""

    def call(self, args: BaseModel, ctx: ToolContext) -> str:
        return self.browse(BrowserRequest(ctx.session_key, self.action, **args.model_dump()), ctx)

    def browse(self, request: BrowserRequest, ctx: ToolContext) -> str:
        return self.result(request, ctx).text

    def result(self, request: BrowserRequest, ctx: ToolContext) -> BrowserResult:
        browse = ctx.host.browse
        if browse is None:
            raise ToolError("no browser is available here")
        return browse(request, ctx.should_stop)


class BrowserNavigate(_BrowserTool):
    name = "browser_navigate"
    description = (
        "Open a URL in a real browser (JavaScript runs; cookies last for this conversation). "
        "Returns the page as an accessibility tree; each element has a ref (e.g. [ref=e12]) "
        "that browser_click and browser_type take."
    )
    action = "navigate"
    Args = NavigateArgs


class BrowserSnapshot(_BrowserTool):
    name = "browser_snapshot"
    description = "Read the current page again as an accessibility tree with element refs."
    action = "snapshot"
    Args = NoArgs


class BrowserClick(_BrowserTool):
    name = "browser_click"
    description = "Click an element (link, button, checkbox) by its ref; returns the new snapshot."
    action = "click"
    Args = ClickArgs


class BrowserType(_BrowserTool):
    name = "browser_type"
    description = "Type text into a field by its ref (optionally press Enter to submit)."
    action = "type"
    Args = TypeArgs


class BrowserPress(_BrowserTool):
    name = "browser_press"
    description = "Press a key on the page (Enter, Tab, Escape, arrows, chords like Control+A)."
    action = "press"
    Args = PressArgs


class BrowserScroll(_BrowserTool):
    name = "browser_scroll"
    description = "Scroll the page down or up by most of a screen; returns the new snapshot."
    action = "scroll"
    Args = ScrollArgs


class BrowserBack(_BrowserTool):
    name = "browser_back"
    description = "Go back to the previous page of this tab."
    action = "back"
    Args = NoArgs


class BrowserClose(_BrowserTool):
    name = "browser_close"
    description = "Close this conversation's browser page (its cookies and storage end too)."
    action = "close"
    Args = NoArgs


class BrowserScreenshot(_BrowserTool):
    name = "browser_screenshot"
    description = (
        "Save a PNG of what the page shows in the workspace and return its path; "
        "vision_analyze reads it."
    )
    action = "screenshot"
    Args = ScreenshotArgs

    def call(self, args: BaseModel, ctx: ToolContext) -> str:
        assert isinstance(args, ScreenshotArgs)
        shown = args.path or f"browser/shot-{time.strftime('%Y%m%d-%H%M%S')}.png"
        path = resolve_in_workspace(ctx.workspace, shown)
        result = self.result(BrowserRequest(ctx.session_key, self.action), ctx)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(result.image)
        return f"{result.text}\nScreenshot saved to {shown} ({len(result.image)} bytes)."


def make_browser_navigate(settings: ToolSettings) -> BrowserNavigate:
    return BrowserNavigate()


def make_browser_snapshot(settings: ToolSettings) -> BrowserSnapshot:
    return BrowserSnapshot()


def make_browser_click(settings: ToolSettings) -> BrowserClick:
    return BrowserClick()


def make_browser_type(settings: ToolSettings) -> BrowserType:
    return BrowserType()


def make_browser_press(settings: ToolSettings) -> BrowserPress:
    return BrowserPress()


def make_browser_scroll(settings: ToolSettings) -> BrowserScroll:
    return BrowserScroll()


def make_browser_back(settings: ToolSettings) -> BrowserBack:
    return BrowserBack()


def make_browser_screenshot(settings: ToolSettings) -> BrowserScreenshot:
    return BrowserScreenshot()


def make_browser_close(settings: ToolSettings) -> BrowserClose:
    return BrowserClose()
