"""The browser against real Chromium and pages this test serves: a login through a form, a page
drawn by JavaScript, a link followed by its ref; requests to a refused address (a redirect, an
image) never leave; sessions do not share cookies; a page that loops is cut off; closing a
session ends its context."""

from __future__ import annotations

import re
import time

import pytest

from hermes_gateway.browser.pool import BrowserPool
from tests.browser.conftest import needs_chromium, settings
from tests.browser.site import Site
from tools.errors import ToolError
from tools.host import BrowserRequest

pytestmark = [needs_chromium]


def go(pool: BrowserPool, session: str, action: str, **kw: object) -> str:
    return pool.browse(BrowserRequest(session, action, **kw), lambda: False).text  # type: ignore[arg-type]


def ref(snapshot: str, pattern: str) -> str:
    """The ref of the first line of ``snapshot`` that matches ``pattern``."""
    for line in snapshot.splitlines():
        if re.search(pattern, line):
            found = re.search(r"\[ref=(e\d+)\]", line)
            if found:
                return found.group(1)
    raise AssertionError(f"no element matching {pattern!r} in:\n{snapshot}")


def test_logs_in_through_a_form_and_reads_the_page_behind_it(pool: BrowserPool, site: Site) -> None:
    page = go(pool, "login", "navigate", url=f"{site.url}/login")
    assert "Sign in" in page
    go(pool, "login", "type", ref=ref(page, r'textbox "User"'), text="ada")
    go(pool, "login", "type", ref=ref(page, r'textbox "Password"'), text="lovelace")
    after = go(pool, "login", "click", ref=ref(page, r'button "Sign in"'))
    assert "Account of ada" in after and "42 pieces of eight" in after
    assert f"URL: {site.url}/private" in after


def test_reads_a_page_drawn_by_javascript(pool: BrowserPool, site: Site) -> None:
    deadline = time.monotonic() + 10
    page = go(pool, "drawn", "navigate", url=f"{site.url}/drawn")
    while "Drawn by script" not in page and time.monotonic() < deadline:
        page = go(pool, "drawn", "snapshot")
    assert "Drawn by script" in page and 'button "Launch"' in page


def test_follows_a_link_by_its_ref_and_goes_back(pool: BrowserPool, site: Site) -> None:
    home = go(pool, "links", "navigate", url=site.url)
    page = go(pool, "links", "click", ref=ref(home, r'link "Go to the next page"'))
    assert "You followed the link" in page
    assert "Home" in go(pool, "links", "back")


def test_a_redirect_to_a_refused_address_is_refused(
    pool: BrowserPool, site: Site, secret: tuple[str, list[str]]
) -> None:
    _, hits = secret
    with pytest.raises(ToolError, match=r"SSRF guard refused.*127\.0\.0\.2"):
        go(pool, "redirect", "navigate", url=f"{site.url}/to-secret")
    assert hits == []


def test_an_image_from_a_refused_address_is_not_loaded(
    pool: BrowserPool, site: Site, secret: tuple[str, list[str]]
) -> None:
    _, hits = secret
    page = go(pool, "image", "navigate", url=f"{site.url}/secret-image")
    assert "With an image" in page
    assert "SSRF guard refused" in page and "127.0.0.2" in page
    assert hits == []


def test_a_refused_address_navigated_to_directly_is_refused(
    pool: BrowserPool, secret: tuple[str, list[str]]
) -> None:
    url, hits = secret
    with pytest.raises(ToolError, match="SSRF guard refused"):
        go(pool, "direct", "navigate", url=url)
    for bad in ("file:///etc/passwd", "chrome://version", "javascript:alert(1)"):
        with pytest.raises(ToolError, match="only http and https"):
            go(pool, "direct", "navigate", url=bad)
    assert hits == []


def test_two_sessions_do_not_see_each_others_cookies(pool: BrowserPool, site: Site) -> None:
    page = go(pool, "alice", "navigate", url=f"{site.url}/login")
    go(pool, "alice", "type", ref=ref(page, r'textbox "User"'), text="ada")
    go(pool, "alice", "type", ref=ref(page, r'textbox "Password"'), text="lovelace", submit=True)
    assert "Account of ada" in go(pool, "alice", "snapshot")
    assert "Not signed in" in go(pool, "bob", "navigate", url=f"{site.url}/private")
    assert "Account of ada" in go(pool, "alice", "navigate", url=f"{site.url}/private")


def test_closing_a_session_ends_its_context_and_cookies(pool: BrowserPool, site: Site) -> None:
    page = go(pool, "closer", "navigate", url=f"{site.url}/login")
    go(pool, "closer", "type", ref=ref(page, r'textbox "User"'), text="ada")
    go(pool, "closer", "type", ref=ref(page, r'textbox "Password"'), text="lovelace", submit=True)
    before = pool.sessions()
    pool.end_session("closer")
    deadline = time.monotonic() + 10
    while pool.sessions() >= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.sessions() == before - 1
    with pytest.raises(ToolError, match="no page is open"):
        go(pool, "closer", "snapshot")
    assert "Not signed in" in go(pool, "closer", "navigate", url=f"{site.url}/private")


def test_a_page_that_loops_is_cut_off_by_the_tool_timeout(site: Site) -> None:
    pool = BrowserPool(settings(timeout_s=4))
    try:
        go(pool, "warm", "navigate", url=site.url)  # the browser's start is not the page's time
        started = time.monotonic()
        with pytest.raises(ToolError, match="did not answer within 4 s"):
            go(pool, "loop", "navigate", url=f"{site.url}/hang")
        assert time.monotonic() - started < 20
        with pytest.raises(ToolError, match="no page is open"):
            go(pool, "loop", "snapshot")  # its page was closed
        assert "Home" in go(pool, "warm", "snapshot")  # the browser and the others go on
    finally:
        pool.close()


@pytest.mark.slow
def test_sessions_are_bounded_and_the_browser_ends_when_idle(site: Site) -> None:
    pool = BrowserPool(settings(max_sessions=2, session_idle_s=1, idle_close_s=1))
    try:
        assert not pool.running()  # nothing is started before the first call
        for session in ("one", "two", "three"):
            go(pool, session, "navigate", url=site.url)
        assert pool.sessions() == 2 and pool.running()
        with pytest.raises(ToolError, match="no page is open"):
            go(pool, "one", "snapshot")  # the least recently used made room
        deadline = time.monotonic() + 20
        while pool.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool.sessions() == 0 and not pool.running()
        assert "Home" in go(pool, "four", "navigate", url=site.url)  # started again on use
    finally:
        pool.close()
