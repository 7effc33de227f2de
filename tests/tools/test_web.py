"""The SSRF guard, `web_extract` and `web_search`, against a fake web on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tools import ToolContext, ToolRegistry
from tools.catalog import ToolSettings, WebSettings, build_registry
from tools.errors import ToolError
from tools.ssrf import SsrfGuard
from tools.web import html_to_markdown

from ..fakes.web import ARTICLE, FakeWeb
from .conftest import call

LOOPBACK = ("127.0.0.1/32",)


@pytest.fixture(scope="module")
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as fake:
        yield fake  # type: ignore[misc]


def tools(**web: Any) -> ToolRegistry:
    return build_registry(["web_extract", "web_search"], ToolSettings(web=WebSettings(**web)))


class TestGuard:
    @pytest.mark.parametrize(
        "address",
        [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",  # cloud metadata
            "100.64.0.1",  # carrier-grade NAT
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fc00::1",
            "::ffff:127.0.0.1",  # IPv4-mapped loopback
            "224.0.0.1",
        ],
    )
    def test_private_addresses_are_refused(self, address: str) -> None:
        assert not SsrfGuard().address_allowed(address)

    @pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "8.8.8.8"])
    def test_public_addresses_pass(self, address: str) -> None:
        assert SsrfGuard().address_allowed(address)

    def test_allowlist_and_allow_private(self) -> None:
        guard = SsrfGuard(allowed_networks=["10.0.0.0/8"])
        assert guard.address_allowed("10.9.9.9") and not guard.address_allowed("127.0.0.1")
        assert SsrfGuard(allow_private=True).address_allowed("192.168.0.10")
        assert not SsrfGuard(allow_private=True).address_allowed("0.0.0.0")

    def test_checked_after_resolution_every_address(self) -> None:
        # a public name whose DNS answers also hold a private address (rebinding, round robin)
        guard = SsrfGuard(resolver=lambda host, port: ["93.184.215.14", "10.0.0.7"])
        with pytest.raises(ToolError, match=r"resolves to a private.*10\.0\.0\.7"):
            guard.pin(httpx.URL("https://innocent.example/"))
        public = SsrfGuard(resolver=lambda host, port: ["93.184.215.14"])
        assert public.pin(httpx.URL("https://innocent.example/")) == "93.184.215.14"

    @pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x/y", "gopher://x"])
    def test_only_http_schemes(self, url: str) -> None:
        with pytest.raises(ToolError, match="only http and https"):
            SsrfGuard().pin(httpx.URL(url))


class TestExtract:
    def test_refused_on_loopback_without_the_allowlist(
        self, web: FakeWeb, ctx: ToolContext
    ) -> None:
        content, ok = call(tools(), ctx, "web_extract", url=f"{web.url}/article")
        assert not ok
        assert "refused: 127.0.0.1 resolves to a private, loopback" in content

    def test_a_page_becomes_markdown(self, web: FakeWeb, ctx: ToolContext) -> None:
        reg = tools(allowed_networks=LOOPBACK)
        content, ok = call(reg, ctx, "web_extract", url=f" {web.url}/article ")
        assert ok, content
        assert content.startswith("# Tide tables for Brest\nURL: http://127.0.0.1:")
        assert "High tide on Monday is at 06:42" in content
        assert "[method](" in content and "**predictions**" in content
        assert "06:42" in content.split("|", 1)[-1]  # the table survived
        assert "tracking" not in content and "Home | About" not in content

    def test_a_redirect_to_a_refused_address_is_refused(
        self, web: FakeWeb, ctx: ToolContext
    ) -> None:
        web.hits.clear()
        target = "http://169.254.169.254/latest/meta-data/"
        reg = tools(allowed_networks=LOOPBACK)
        content, ok = call(reg, ctx, "web_extract", url=f"{web.url}/redirect?to={target}")
        assert not ok and "169.254.169.254" in content and "refused" in content
        assert web.hits == ["/redirect"]

    def test_redirects_are_followed_and_capped(self, web: FakeWeb, ctx: ToolContext) -> None:
        reg = tools(allowed_networks=LOOPBACK, max_redirects=1)
        content, ok = call(reg, ctx, "web_extract", url=f"{web.url}/redirect?to=/plain")
        assert ok and content.endswith("just text\nline two")
        assert f"URL: {web.url}/plain" in content
        hop = f"{web.url}/redirect?to=/redirect%3Fto%3D/plain"
        content, ok = call(reg, ctx, "web_extract", url=hop)
        assert (content, ok) == ("Error: too many redirects (more than 1)", False)

    def test_size_cap_and_output_cap(self, web: FakeWeb, ctx: ToolContext) -> None:
        reg = tools(allowed_networks=LOOPBACK, max_bytes=10_000)
        content, ok = call(reg, ctx, "web_extract", url=f"{web.url}/big", max_chars=2000)
        assert ok
        assert content.endswith("[cut at 2000 characters]")
        reg = tools(allowed_networks=LOOPBACK, max_bytes=3000)
        content, _ = call(reg, ctx, "web_extract", url=f"{web.url}/big", max_chars=20_000)
        assert content.count("x") == 3000
        assert content.endswith("larger than 3000 bytes: only its start was read]")

    @pytest.mark.parametrize(
        ("path", "args", "needle"),
        [
            ("/binary", {}, "is image/png, not a text or HTML page"),
            ("/missing", {}, "answered HTTP 404"),
            (
                "/plain",
                {"max_chars": 10},
                "max_chars: Input should be greater than or equal to 500",
            ),
        ],
    )
    def test_bad_pages_and_arguments(
        self, web: FakeWeb, ctx: ToolContext, path: str, args: dict[str, Any], needle: str
    ) -> None:
        reg = tools(allowed_networks=LOOPBACK)
        content, ok = call(reg, ctx, "web_extract", url=f"{web.url}{path}", **args)
        assert not ok and needle in content

    def test_unreachable_and_malformed_urls(self, ctx: ToolContext) -> None:
        reg = tools(allowed_networks=LOOPBACK, timeout_s=2)
        content, ok = call(reg, ctx, "web_extract", url="http://127.0.0.1:9/")
        assert not ok and content.startswith("Error: cannot fetch 127.0.0.1: ConnectError")
        content, ok = call(reg, ctx, "web_extract", url="http://")
        assert (content, ok) == ("Error: URL 'http:' has no host", False)


class TestSearch:
    def test_results_from_the_configured_searxng(self, web: FakeWeb, ctx: ToolContext) -> None:
        # the operator's own search service may be on a private address: no allowlist needed
        reg = tools(search_url=web.url)
        content, ok = call(reg, ctx, "web_search", query=" brest tides ", max_results=2)
        assert ok, content
        assert content == (
            "1. Tides\n   https://example.org/tides\n   Tide tables.\n"
            "2. Moon phases\n   https://example.org/moon"
        )
        assert web.searches[-1] == {"q": "brest tides", "format": "json"}

    def test_not_configured_and_broken_service(self, web: FakeWeb, ctx: ToolContext) -> None:
        content, ok = call(tools(), ctx, "web_search", query="x")
        assert not ok and "tools.web.search_url is empty" in content
        reg = tools(search_url=f"{web.url}/plain")  # answers, but not JSON
        content, ok = call(reg, ctx, "web_search", query="x")
        assert (content, ok) == ("Error: the search service answered HTTP 404", False)
        reg = tools(search_url=f"{web.url}/json?")  # JSON, but not a search answer
        content, ok = call(reg, ctx, "web_search", query="x")
        assert not ok and "unreadable" in content

    def test_no_results(self, web: FakeWeb, ctx: ToolContext) -> None:
        saved = web.search_results
        web.search_results = []
        try:
            content, ok = call(tools(search_url=web.url), ctx, "web_search", query="nothing")
        finally:
            web.search_results = saved
        assert (content, ok) == ("(no results for 'nothing')", True)


def test_html_fallback_for_pages_without_main_content() -> None:
    title, body = html_to_markdown(b"<html><head><title>T</title></head><body>hi</body></html>")
    assert (title, body) == ("T", "hi")
    title, _ = html_to_markdown(ARTICLE.encode())
    assert title == "Tide tables for Brest" or title == "Tide tables"
