"""The agent's browser: one Chromium driven by Playwright on a thread of its own, a context per
session, every connection through the SSRF guard (docs/browser.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tools.builtin import BrowserToolConfig

if TYPE_CHECKING:
    from hermes_gateway.browser.pool import BrowserPool
    from hermes_gateway.config import Config

PREFIX = "browser_"


def browser_enabled(config: Config) -> bool:
    """Whether any platform's sessions may use a `browser_*` tool."""
    tools = config.tools
    lists = [tools.enabled, *tools.platforms.values()]
    return any(name.startswith(PREFIX) for names in lists for name in names)


def browser_settings(config: Config) -> BrowserToolConfig:
    found = config.tools.sections().get("browser")
    return found if isinstance(found, BrowserToolConfig) else BrowserToolConfig()


def browser_pool(config: Config) -> BrowserPool | None:
    """The gateway's browser when a browser tool is enabled (no thread, no process until the
    first call), else None: nothing of it is imported then."""
    if not browser_enabled(config):
        return None
    from hermes_gateway.browser.pool import BrowserPool

    return BrowserPool(browser_settings(config))
