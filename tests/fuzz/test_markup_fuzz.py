"""What `tests/test_markup.py` and `tests/test_splitter.py` do not already cover: any Unicode
(CJK, right-to-left, astral emoji, ZWJ sequences, combining marks) mixed with Markdown, long
answers at each platform's real limit, and fences balanced in every Discord and Slack part.

Every part fits the limit as the platform counts it, Telegram accepts every part (the fake
Bot API's own parser), no code fence is left open at a cut, and nothing is lost."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.discord.render import split_rendered_discord
from adapters.slack.render import split_rendered_slack
from adapters.telegram.render import split_rendered_telegram, telegram_html_to_plain
from hermes_gateway.text.splitter import utf16_len
from tests.fakes.telegram import check_text
from tests.fuzz.strategies import examples
from tests.hermes_gateway.text.test_markup import (
    assert_content_kept,
    assert_telegram_html,
    slack_visible,
)
from tests.hermes_gateway.text.test_splitter import read_fences

FUZZ = settings(
    max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
HARD = st.sampled_from(
    [
        "👩‍👩‍👧‍👦",  # a ZWJ family: one grapheme, 11 UTF-16 units
        "🇩🇪🇯🇵",  # flags: regional indicator pairs
        "é",  # e + combining accent
        "שלום עולם",  # right to left
        "漢字かな交じり文",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",  # astral plane letters
        "\u200b\u2028\u00a0",  # zero width space, line separator, no-break space
        "<b>&amp;</b>",  # looks like markup, is text
    ]
)
MARKDOWN = st.sampled_from(
    [
        "**",
        "_",
        "`",
        "~~",
        "\n",
        "\n\n",
        "# ",
        "> ",
        "- ",
        "| a | b |\n|---|---|\n",
        "[x](https://e.com/?a=1&b=2)",
    ]
)


@st.composite
def fence(draw: st.DrawFn) -> str:
    run = draw(st.sampled_from(["```", "~~~", "````"]))
    info = draw(st.sampled_from(["", "python", "c++", "js title"]))
    body = "\n".join(draw(st.lists(ANY_TEXT | HARD, min_size=1, max_size=30)))
    closed = draw(st.booleans()) or draw(st.booleans())
    return f"\n{run}{info}\n{body}" + (f"\n{run}\n" if closed else "\n")


ANSWER = st.lists(ANY_TEXT | HARD | MARKDOWN | fence(), max_size=60).map("".join)
LONG_ANSWER = st.lists(ANSWER, min_size=1, max_size=4).map(lambda parts: "".join(parts) * 25)


def fences_closed(part: str) -> bool:
    return read_fences(part)[1] is None


def slack_fences_closed(part: str) -> bool:
    """Slack knows only ``` and cannot escape it: every one in a part opens or closes."""
    return part.count("```") % 2 == 0


def test_slack_code_that_shows_a_fence_stays_one_code_block() -> None:
    """Found by the fuzzer: a code block whose text holds ``` (a tilde fence showing Markdown)
    came out as several broken code blocks in Slack, which cannot escape ```."""
    md = "How to fence code:\n\n~~~markdown\n```python\nprint(1)\n```\n~~~\n\nDone."
    [part] = split_rendered_slack(md, 3900)
    assert part.count("```") == 2
    code = part.split("```")[1]
    assert code.replace("\u200b", "") == "\n```python\nprint(1)\n```\n"


@FUZZ
@given(md=LONG_ANSWER)
def test_telegram_long_answers_any_unicode(md: str) -> None:
    parts = split_rendered_telegram(md, 4096)
    for part in parts:
        assert utf16_len(part) <= 4096
        assert_telegram_html(part)
        check_text(part, "HTML")  # the fake Bot API's parser: what Telegram would accept
    assert_content_kept(md, "".join(telegram_html_to_plain(p) for p in parts), exact=False)


@FUZZ
@given(md=ANSWER, limit=st.integers(40, 400))
def test_telegram_small_limits_any_unicode(md: str, limit: int) -> None:
    parts = split_rendered_telegram(md, limit)
    for part in parts:
        assert utf16_len(part) <= limit
        assert_telegram_html(part)
    assert_content_kept(md, "".join(telegram_html_to_plain(p) for p in parts), exact=False)


@FUZZ
@given(md=LONG_ANSWER)
def test_discord_and_slack_long_answers_keep_fences_balanced(md: str) -> None:
    for split, limit, visible, closed in (
        (split_rendered_discord, 2000, str, fences_closed),
        (split_rendered_slack, 3900, slack_visible, slack_fences_closed),
    ):
        parts = split(md, limit)
        assert all(utf16_len(p) <= limit for p in parts), split.__name__
        assert all(closed(p) for p in parts), split.__name__
        assert_content_kept(md, "".join(visible(p) for p in parts), exact=False)


@FUZZ
@given(md=ANSWER, limit=st.integers(40, 300))
def test_discord_and_slack_small_limits_keep_fences_balanced(md: str, limit: int) -> None:
    for split, closed in (
        (split_rendered_discord, fences_closed),
        (split_rendered_slack, slack_fences_closed),
    ):
        parts = split(md, limit)
        assert all(utf16_len(p) <= limit for p in parts)
        assert all(closed(p) for p in parts), (split.__name__, parts)
