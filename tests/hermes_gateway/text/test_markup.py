"""Tests for Markdown to Telegram HTML / Slack mrkdwn / Discord, and rendered splitting."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.discord.render import split_rendered_discord, to_discord
from adapters.slack.render import split_rendered_slack, to_slack_mrkdwn
from adapters.telegram.render import (
    split_rendered_telegram,
    telegram_html_to_plain,
    to_telegram_html,
)
from hermes_gateway.text.splitter import utf16_len
from tests.fakes.telegram import check_text

ALLOWED = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre"}
ALLOWED |= {"tg-spoiler", "blockquote"}


class TelegramHtmlChecker(HTMLParser):
    """Telegram's HTML rules, independently: allowed tags only, balanced, legal nesting."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        assert tag in ALLOWED, tag
        if tag == "a":
            assert len(attrs) == 1 and attrs[0][0] == "href" and attrs[0][1], attrs
        elif tag == "code" and attrs:
            assert self.stack[-1:] == ["pre"] and attrs[0][0] == "class", attrs
            assert (attrs[0][1] or "").startswith("language-")
        else:
            assert not attrs, (tag, attrs)
        inside_code = {"code", "pre"} & set(self.stack)
        assert not inside_code or (tag == "code" and self.stack[-1] == "pre"), self.stack
        assert not (tag in ("a", "code", "pre") and "a" in self.stack), self.stack
        assert not (tag == "blockquote" and tag in self.stack)
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (self.stack, tag)
        self.stack.pop()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raise AssertionError(f"self-closing <{tag}/>")

    def handle_data(self, data: str) -> None:
        assert not set(data) & set("<>&"), data

    def handle_entityref(self, name: str) -> None:
        assert name in ("lt", "gt", "amp", "quot"), name

    def handle_comment(self, data: str) -> None:
        raise AssertionError("comment")


def assert_telegram_html(html: str) -> None:
    checker = TelegramHtmlChecker()
    checker.feed(html)
    checker.close()
    assert not checker.stack, checker.stack


def alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def is_subsequence(small: str, big: str) -> bool:
    chars = iter(big)
    return all(c in chars for c in small)


def without_fence_info(md: str) -> str:
    """`md` minus fence info strings (``python`` in ```` ```python ````): they become a
    language attribute, not text. Over-approximates: every fence-looking line loses its rest."""
    return re.sub(r"(?m)^([ \t>]*)(`{3,}|~{3,}).*$", r"\1\2", md)


def assert_content_kept(md: str, visible: str, exact: bool = True) -> None:
    """Nothing lost: every alphanumeric of `md` (outside fence info) shows, in order; and with
    `exact`, nothing shows that `md` does not have."""
    assert is_subsequence(alnum(without_fence_info(md)), alnum(visible)), (md, visible)
    if exact:
        assert is_subsequence(alnum(visible), alnum(md)), (md, visible)


def slack_visible(mrkdwn: str) -> str:
    """What Slack shows: ``<url|label>`` as "label url", entities decoded."""
    shown = re.sub(r"<([^|<>]+)\|([^<>]*)>", r"\2 \1", mrkdwn)
    return shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# --- Telegram HTML ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("md", "html"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*it* and _it_", "<i>it</i> and <i>it</i>"),
        ("~~gone~~ but ~5 min", "<s>gone</s> but ~5 min"),
        ("***both***", "<i><b>both</b></i>"),
        ("snake_case_names and __init__.py", "snake_case_names and <b>init</b>.py"),
        ("my_var_name = 2*3*4", "my_var_name = 2*3*4"),
        ("这是**粗体**文字", "这是<b>粗体</b>文字"),
        ("**not closed and `tick", "**not closed and `tick"),
        ("a ** b ** c", "a ** b ** c"),
        (r"\*literal\* and \_x\_", "*literal* and _x_"),
        ("x < y && y > z", "x &lt; y &amp;&amp; y &gt; z"),
        ("`<b>**x**</b>` & more", "<code>&lt;b&gt;**x**&lt;/b&gt;</code> &amp; more"),
        ("`` a`b ``", "<code>a`b</code>"),
        ("[site](https://e.com/?a=1&b=2)", '<a href="https://e.com/?a=1&amp;b=2">site</a>'),
        ('[q](https://e.com/"x")', '<a href="https://e.com/&quot;x&quot;">q</a>'),
        ("[**b** c](https://e.com)", '<a href="https://e.com"><b>b</b> c</a>'),
        ("[`code`](https://e.com)", '<a href="https://e.com">code</a>'),
        ("[rel](docs/x.md)", "rel (docs/x.md)"),
        ("<https://e.com/x>", '<a href="https://e.com/x">https://e.com/x</a>'),
        ("# Title *x*", "<b>Title <i>x</i></b>"),
        ("### Sub ###", "<b>Sub</b>"),
        ("#hashtag", "#hashtag"),
        ("> quoted **q**\n> more", "<blockquote>quoted <b>q</b>\nmore</blockquote>"),
        ("> a\n> > nested", "<blockquote>a\nnested</blockquote>"),
        ("- a\n* b\n+ c\n  - sub\n1. one\n2) two", "• a\n• b\n• c\n  • sub\n1. one\n2) two"),
        ("above\n\n---\n\nbelow", "above\n\n———\n\nbelow"),
        ("para\n# head\ntext", "para\n<b>head</b>\ntext"),
    ],
)
def test_telegram_rules(md: str, html: str) -> None:
    assert to_telegram_html(md) == html
    assert_telegram_html(html)


def test_telegram_fenced_code() -> None:
    md = "Look:\n\n```python title=x.py\nif a < b and c:\n    print('&')\n```\n\n```\nplain\n```"
    assert to_telegram_html(md) == (
        'Look:\n\n<pre><code class="language-python">if a &lt; b and c:\n'
        "    print('&amp;')</code></pre>\n\n<pre>plain</pre>"
    )


def test_telegram_indented_and_unclosed_fences() -> None:
    md = "1. step\n   ```sh\n   make **all**\n   ```\n2. done\n```\nno closer"
    assert to_telegram_html(md) == (
        '1. step\n<pre><code class="language-sh">make **all**</code></pre>\n'
        "2. done\n<pre>no closer</pre>"
    )


def test_telegram_table_is_monospace() -> None:
    md = "| Name | Age |\n|:-----|----:|\n| **Alice** | 30 |\n| Bob | 4 |\n\nafter"
    assert to_telegram_html(md) == (
        "<pre>Name  | Age\n------+----\nAlice | 30\nBob   | 4</pre>\n\nafter"
    )


def test_headerless_pipe_rows_are_a_table() -> None:
    # What the second part of a split table looks like.
    assert to_telegram_html("| a | b |\n| cc | d |") == "<pre>a  | b\ncc | d</pre>"


def test_unclosed_empty_fence_is_text() -> None:
    # What a part holds when the splitter had to cut a line such as "```[a](url)```".
    assert to_telegram_html("```[a b](https://e.com/p?x=") == "```[a b](https://e.com/p?x="
    assert to_telegram_html("```py\n\n") == "```py"


def test_telegram_html_to_plain() -> None:
    assert telegram_html_to_plain("<b>a &amp; b</b> &lt;x&gt; &#x27;q&#39;") == "a & b <x> 'q'"
    html = to_telegram_html("see [the docs](https://e.com/?a=1&b=2) or <https://x.io>")
    assert telegram_html_to_plain(html) == "see the docs (https://e.com/?a=1&b=2) or https://x.io"


# --- Slack ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("md", "mrkdwn"),
    [
        ("**bold** *it* _it_ ~~s~~", "*bold* _it_ _it_ ~s~"),
        ("snake_case and 2*3*4", "snake_case and 2*3*4"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("`x<y`", "`x&lt;y`"),
        ("[site](https://e.com/?a=1&b=2)", "<https://e.com/?a=1&amp;b=2|site>"),
        ("[a|b](https://e.com/x|y)", "<https://e.com/x%7Cy|a|b>"),
        ("[**bold** link](https://e.com)", "<https://e.com|bold link>"),
        ("<https://e.com>", "https://e.com"),
        ("<@U123> <!channel>", "&lt;@U123&gt; &lt;!channel&gt;"),
        ("# Head **x**", "*Head x*"),
        ("- a\n* b", "• a\n• b"),
        ("> q\n> > r", "> q\n> r"),
        ("```python\nprint(1 < 2)\n```", "```\nprint(1 &lt; 2)\n```"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "```\na | b\n--+--\n1 | 2\n```"),
    ],
)
def test_slack_rules(md: str, mrkdwn: str) -> None:
    assert to_slack_mrkdwn(md) == mrkdwn


# --- Discord --------------------------------------------------------------------------------


def test_discord_leaves_markdown_alone() -> None:
    md = "# Title\n\n**b** _i_ ~~s~~ [l](https://e.com) `c`\n\n> q\n- item\n```py\nx | y\n```\n"
    assert to_discord(md) == md


def test_discord_converts_tables_only_outside_fences() -> None:
    md = "Intro\n| a | b |\n|---|---|\n| **1** | 2 |\nOutro\n```\n| x | y |\n|---|---|\n```"
    assert to_discord(md) == (
        "Intro\n```\na | b\n--+--\n1 | 2\n```\nOutro\n```\n| x | y |\n|---|---|\n```"
    )


# --- splitting rendered output --------------------------------------------------------------


def test_split_rendered_short_and_blank() -> None:
    assert split_rendered_telegram("**hi** <there>") == ["<b>hi</b> &lt;there&gt;"]
    assert split_rendered_telegram("  \n\n") == []
    with pytest.raises(ValueError, match="at least"):
        split_rendered_telegram("x", limit=8)


def test_the_fallback_fits_a_tiny_limit_when_escaping_and_fences_leave_no_room() -> None:
    # found by hypothesis: '&' escapes to 5 units, and a fence line plus its closing marker
    # around one of them did not fit in 16, so the fence-aware split raised ValueError
    md = "&\n```py\n" * 3
    parts = split_rendered_slack(md, 16)
    assert parts and all(utf16_len(p) <= 16 for p in parts)
    assert_content_kept(md, "".join(slack_visible(p) for p in parts), exact=False)


def test_split_rendered_telegram_reparts_when_escaping_grows_past_the_limit() -> None:
    # 4000 units of Markdown fit one part, but every '<' becomes '&lt;' in HTML.
    code = "\n".join(f"if a{i} < b and c < d: x <<= 1" for i in range(125))
    md = f"```python\n{code}\n```"
    assert utf16_len(md) <= 4096 < utf16_len(to_telegram_html(md))
    parts = split_rendered_telegram(md)
    assert len(parts) >= 2
    for part in parts:
        assert utf16_len(part) <= 4096
        assert_telegram_html(part)
        assert part.startswith('<pre><code class="language-python">')
        check_text(part, "HTML")  # what the fake Bot API server accepts
    assert telegram_html_to_plain("\n".join(parts)) == code


def test_split_rendered_fills_parts_again_after_markup_heavy_text() -> None:
    md = "```\n" + "a<b\n" * 3000 + "```\n\n" + "word " * 4000  # '<' costs 4 in HTML
    sizes = [utf16_len(p) for p in split_rendered_telegram(md)]
    assert max(sizes) <= 4096
    assert min(sizes[:-1]) > 2800  # parts stay full, not stuck at the code's budget
    assert sum(s > 3800 for s in sizes) >= len(sizes) - 3


def test_split_rendered_keeps_text_of_a_line_cut_after_its_backticks() -> None:
    md = "[a b](https://e.com/p?x=1&y=2)```" * 3
    parts = split_rendered_telegram(md, 33)
    assert all(utf16_len(p) <= 33 for p in parts)
    assert alnum("".join(telegram_html_to_plain(p) for p in parts)) == alnum(md)


def test_split_rendered_long_answer_for_each_platform() -> None:
    row = "| **name** | value & more |\n"
    md = ("Some *prose* with a [link](https://e.com/?a&b). " * 20 + "\n\n") * 8
    md += "```js\n" + "let x = a < b && c;\n" * 300 + "```\n\n| k | v |\n|---|---|\n" + row * 80
    for split, limit in (
        (split_rendered_telegram, 4096),
        (split_rendered_slack, 3900),
        (split_rendered_discord, 2000),
    ):
        parts = split(md)
        assert len(parts) > 2
        assert all(utf16_len(p) <= limit for p in parts), split.__name__
    for part in split_rendered_telegram(md):
        assert_telegram_html(part)
    for part in split_rendered_discord(md):
        assert part.count("```") % 2 == 0


# --- properties -----------------------------------------------------------------------------

CHARS = [*"abZ9é *_~`[]()#>|-\n<&>", "😀", "\\"]
TOKENS = [*CHARS, "**", "__", "~~", "```", "\n```py\n", "\n> ", "\n- ", "\n# ", "|---|", "\n\n"]
markdownish = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
LINKS = ["[a b](https://e.com/p?x=1&y=2)", "[**c**](http://e.org/q'\"z)", "<https://e.io/k&l>"]
with_links = st.lists(st.sampled_from([*TOKENS, *LINKS]), max_size=60).map("".join)


@settings(max_examples=200, deadline=None)
@given(md=markdownish)
def test_property_telegram_well_formed_and_nothing_lost(md: str) -> None:
    html = to_telegram_html(md)
    assert_telegram_html(html)
    assert_content_kept(md, telegram_html_to_plain(html))


@settings(max_examples=150, deadline=None)
@given(md=with_links)
def test_property_links_keep_urls_in_plain_and_slack(md: str) -> None:
    html = to_telegram_html(md)
    assert_telegram_html(html)
    assert_content_kept(md, telegram_html_to_plain(html))
    assert_content_kept(md, slack_visible(to_slack_mrkdwn(md)))


@settings(max_examples=200, deadline=None)
@given(md=markdownish)
def test_property_slack_never_raises_and_nothing_lost(md: str) -> None:
    assert_content_kept(md, slack_visible(to_slack_mrkdwn(md)))


@settings(max_examples=100, deadline=None)
@given(md=with_links.map(lambda s: s * 3), limit=st.integers(16, 300))
def test_property_split_rendered_telegram(md: str, limit: int) -> None:
    parts = split_rendered_telegram(md, limit)
    for part in parts:
        assert utf16_len(part) <= limit
        assert_telegram_html(part)
        plain = telegram_html_to_plain(part)
        assert plain.strip()
        assert utf16_len(re.sub(r"<[^>]*>", "", part).replace("&lt;", "<")) <= limit
    # Re-opened fences repeat their info string as text only in the tiny-limit fallback.
    assert_content_kept(md, "".join(telegram_html_to_plain(p) for p in parts), exact=False)


@settings(max_examples=100, deadline=None)
@given(md=markdownish.map(lambda s: s * 3), limit=st.integers(16, 200))
def test_property_split_rendered_slack_and_discord(md: str, limit: int) -> None:
    slack = split_rendered_slack(md, limit)
    assert all(utf16_len(p) <= limit for p in slack)
    assert_content_kept(md, "".join(slack_visible(p) for p in slack), exact=False)
    discord = split_rendered_discord(md, limit)
    assert all(utf16_len(p) <= limit for p in discord)
    assert_content_kept(md, "".join(discord), exact=False)
