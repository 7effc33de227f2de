"""WhatsApp's rendering of the Markdown models write: its own marks (``*bold*``, ``_italic_``,
``~strike~``, ```` ```monospace``` ````), links as "label (url)", tables as monospace, split to
the text limit. WhatsApp has no escape for its marks: text goes as it is."""

from __future__ import annotations

from hermes_gateway.platforms import (
    RULE_TEXT,
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

MARKS = {"b": "*", "i": "_", "s": "~"}


def wa_inline(nodes: tuple[Inline, ...], in_bold: bool = False) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Code):
            out.append(f"`{node.text}`")
        elif isinstance(node, Styled):
            inner = wa_inline(node.children, in_bold or node.tag == "b")
            # a `*` inside `*...*` would end the bold early: nested bold is just its text
            mark = "" if in_bold and node.tag == "b" else MARKS.get(node.tag, "")
            out.append(f"{mark}{inner}{mark}")
        else:
            out.append(plain((node,)))
    return "".join(out)


def render_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return wa_inline(block.inline)
    if isinstance(block, Heading):
        return f"*{wa_inline(block.inline, in_bold=True)}*"
    if isinstance(block, CodeBlock):
        return f"```{block.code}```"
    if isinstance(block, Quote):
        inner = join_blocks(block.blocks, render_block)
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
    if isinstance(block, Table):
        return f"```{table_text(block)}```"
    return RULE_TEXT


def to_whatsapp(md: str) -> str:
    return join_blocks(parse_blocks(md), render_block)


_WHATSAPP = Target(to_whatsapp, str, str.strip)


def split_whatsapp(md: str, limit: int) -> list[str]:
    """The parts of a reply, each at most ``limit`` characters as WhatsApp shows them."""
    return split_rendered(md, limit, _WHATSAPP)
