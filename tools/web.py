"""`web_search` (a SearXNG-compatible JSON endpoint) and `web_extract` (a page as Markdown).

Both go through the SSRF guard (`tools.ssrf`) with size and time caps. HTML becomes readable
Markdown through trafilatura (main content, links and tables kept), imported on first use.
"""

from __future__ import annotations

import json
import re
import threading
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.registry import ModelTool, ToolContext
from tools.ssrf import Fetched, SsrfGuard, guarded_get

if TYPE_CHECKING:
    from tools.catalog import ToolSettings, WebSettings

_TEXT_TYPES = ("text/plain", "text/markdown", "application/json", "text/csv", "application/xml")


class _WebTool(ModelTool):
    parallel_safe = True

    def __init__(self, settings: WebSettings, guard: SsrfGuard | None = None) -> None:
        self.settings = settings
        trusted = [httpx.URL(settings.search_url).host] if settings.search_url else []
        self.guard = guard or SsrfGuard(
            allow_private=settings.allow_private,
            allowed_networks=settings.allowed_networks,
            trusted_hosts=trusted,  # the operator configured it: it may be on the LAN
        )
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    limits=httpx.Limits(max_connections=16, max_keepalive_connections=4),
                    trust_env=False,  # no proxy from the environment: the guard sees the target
                )
            return self._client

    def fetch(self, url: str, ctx: ToolContext, accept: str) -> Fetched:
        s = self.settings
        return guarded_get(
            self.client(),
            url,
            self.guard,
            max_bytes=s.max_bytes,
            timeout_s=s.timeout_s,
            max_redirects=s.max_redirects,
            should_stop=ctx.should_stop,
            headers={"User-Agent": s.user_agent, "Accept": accept},
        )


class WebSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to search the web for.", min_length=1, max_length=500)
    max_results: int = Field(8, ge=1, le=20, description="How many results to return.")


class WebSearchTool(_WebTool):
    name = "web_search"
    description = (
        "Search the web. Returns numbered results with title, URL and a snippet; read a "
        "result in full with web_extract."
    )
    Args = WebSearchArgs

    def call(self, args: WebSearchArgs, ctx: ToolContext) -> str:
        base = self.settings.search_url.rstrip("/")
        if not base:
            raise ToolError("web search is not configured (tools.web.search_url is empty)")
        endpoint = base if base.endswith("/search") else f"{base}/search"
        url = httpx.URL(endpoint, params={"q": args.query.strip(), "format": "json"})
        fetched = self.fetch(str(url), ctx, "application/json")
        if fetched.status != 200:
            raise ToolError(f"the search service answered HTTP {fetched.status}")
        try:
            data = json.loads(fetched.body)
            results = data["results"]
            if not isinstance(results, list):
                raise TypeError("results is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"the search service sent an unreadable answer ({exc})") from None
        lines = []
        for n, item in enumerate(r for r in results if isinstance(r, dict) and r.get("url")):
            if n >= args.max_results:
                break
            title = _one_line(str(item.get("title") or "(no title)"), 200)
            snippet = _one_line(str(item.get("content") or ""), 400)
            lines.append(
                f"{n + 1}. {title}\n   {item['url']}" + (f"\n   {snippet}" if snippet else "")
            )
        return "\n".join(lines) if lines else f"(no results for {args.query.strip()!r})"


class WebExtractArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The http(s) URL of the page to read.", min_length=1)
    max_chars: int = Field(
        20_000, ge=500, le=100_000, description="Most characters of page text to return."
    )


class WebExtractTool(_WebTool):
    name = "web_extract"
    description = (
        "Fetch a web page and return its main content as Markdown (title, text, links, "
        "tables), cut at max_chars. Plain-text and JSON documents are returned as they are."
    )
    Args = WebExtractArgs

    def call(self, args: WebExtractArgs, ctx: ToolContext) -> str:
        fetched = self.fetch(args.url, ctx, "text/html,application/xhtml+xml,text/plain;q=0.9")
        if fetched.status >= 400:
            raise ToolError(f"{fetched.url} answered HTTP {fetched.status}")
        kind = fetched.content_type.split(";", 1)[0].strip().lower()
        if kind in ("text/html", "application/xhtml+xml", "") or kind.endswith("+xml"):
            title, body = html_to_markdown(fetched.body, fetched.url)
        elif kind.startswith("text/") or kind in _TEXT_TYPES:
            title, body = "", fetched.body.decode(_charset(fetched.content_type), "replace")
        else:
            raise ToolError(f"{fetched.url} is {kind}, not a text or HTML page")
        head = f"# {title}\n" if title else ""
        text = f"{head}URL: {fetched.url}\n\n{body.strip() or '(the page has no readable text)'}"
        if fetched.truncated:
            cap = self.settings.max_bytes
            text += f"\n[the page is larger than {cap} bytes: only its start was read]"
        if len(text) > args.max_chars:
            text = text[: args.max_chars] + f"\n[cut at {args.max_chars} characters]"
        return text


def html_to_markdown(html: bytes, url: str = "") -> tuple[str, str]:
    """(title, Markdown of the main content); a plain text walk when extraction finds none."""
    import trafilatura  # about 0.4 s to import: only when a page is read

    text = trafilatura.extract(
        html,
        url=url or None,
        output_format="markdown",
        include_links=True,
        include_formatting=True,
        include_tables=True,
        favor_recall=True,
    )
    meta = trafilatura.extract_metadata(html)
    title = (meta.title if meta is not None else None) or ""
    if not text:
        title_fallback, text = _plain_text(html.decode("utf-8", "replace"))
        title = title or title_fallback
    return _one_line(title, 300), text or ""


class _TextWalk(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self._skip += 1
        self._in_title = self._in_title or tag == "title"
        if tag in ("p", "br", "div", "li", "h1", "h2", "h3", "tr", "section", "article"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip > 0:
            self._skip -= 1
        self._in_title = self._in_title and tag != "title"

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.parts.append(data)


def _plain_text(html: str) -> tuple[str, str]:
    walk = _TextWalk()
    walk.feed(html)
    walk.close()
    text = re.sub(r"[ \t]+", " ", "".join(walk.parts))
    text = re.sub(r"\n\s*\n+", "\n\n", text)
    return "".join(walk.title).strip(), text.strip()


def _charset(content_type: str) -> str:
    match = re.search(r"charset=([\w.-]+)", content_type, re.IGNORECASE)
    if match:
        try:
            "".encode(match.group(1))
            return match.group(1)
        except LookupError:
            pass
    return "utf-8"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def make_web_search(settings: ToolSettings) -> WebSearchTool:
    return WebSearchTool(settings.web)


def make_web_extract(settings: ToolSettings) -> WebExtractTool:
    return WebExtractTool(settings.web)
