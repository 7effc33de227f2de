"""Slack's rendering of the Markdown models write: mrkdwn (one quote level, no code language,
tables as code blocks), escaped for Slack, split to its message limit."""

from __future__ import annotations

import re

from hermes_gateway.platforms import (
    RULE_TEXT,
    SAFE_URL,
    Block,
    Code,
    CodeBlock,
    Heading,
    Inline,
    Paragraph,
    Quote,
    Styled,
    Table,
    Target,
    Text,
    join_blocks,
    parse_blocks,
    plain,
    split_rendered,
    table_text,
)

_TICKS = re.compile(r"`{3,}")


def slack_escape(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # Slack reads ``` anywhere as a code-block delimiter and has no escape for it: a run of
    # three or more backticks in text or code would open or close a block (fuzzing)
    return _TICKS.sub(lambda m: "\u200b".join(m.group()), text) if "```" in text else text


def _slack_url(url: str) -> str:
    return slack_escape(url).replace("|", "%7C")


def slack_inline(nodes: tuple[Inline, ...], in_bold: bool = False) -> str:
    marks = {"b": "*", "i": "_", "s": "~"}
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(slack_escape(node.text))
        elif isinstance(node, Code):
            out.append(f"`{slack_escape(node.text)}`")
        elif isinstance(node, Styled):
            inner = slack_inline(node.children, in_bold or node.tag == "b")
            # `*` inside `*...*` would end the bold early: nested bold is just its text.
            mark = "" if in_bold and node.tag == "b" else marks[node.tag]
            out.append(f"{mark}{inner}{mark}")
        elif not SAFE_URL.fullmatch(node.url):
            out.append(slack_escape(plain((node,))))
        else:
            label = plain(node.children).replace("\n", " ").strip()
            url = _slack_url(node.url)
            out.append(f"<{url}|{slack_escape(label)}>" if label and label != node.url else url)
    return "".join(out)


class SlackRenderer:
    """Blocks to Slack mrkdwn: code blocks lose their language, tables become code blocks,
    nested quotes are flattened (Slack has one quote level)."""

    def __init__(self, in_quote: bool = False) -> None:
        self.in_quote = in_quote

    def __call__(self, block: Block) -> str:
        if isinstance(block, Paragraph):
            return slack_inline(block.inline)
        if isinstance(block, Heading):
            return f"*{slack_inline(block.inline, in_bold=True)}*"
        if isinstance(block, CodeBlock):
            return f"```\n{slack_escape(block.code)}\n```"
        if isinstance(block, Quote):
            inner = join_blocks(block.blocks, SlackRenderer(in_quote=True))
            if self.in_quote:
                return inner
            return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
        if isinstance(block, Table):
            return f"```\n{slack_escape(table_text(block))}\n```"
        return RULE_TEXT


def render_slack(blocks: list[Block]) -> str:
    return join_blocks(blocks, SlackRenderer())


def to_slack_mrkdwn(md: str) -> str:
    """Markdown to Slack mrkdwn; ``& < >`` in the text are escaped."""
    return render_slack(parse_blocks(md))


_SLACK = Target(to_slack_mrkdwn, slack_escape, str)


def split_rendered_slack(md: str, limit: int = 3900) -> list[str]:
    """Like `split_rendered_telegram`, for Slack mrkdwn; parts are at most `limit` units."""
    return split_rendered(md, limit, _SLACK)
