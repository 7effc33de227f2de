"""What a platform package may use of the gateway: every name below, imported from here
(`from hermes_gateway.platforms import AdapterHost, MessageEvent, with_retry`). A platform
that needs something else asks for it to be added here; a test keeps adapters to this list.

The names load on first use (PEP 562), so importing a platform's `SPEC` to validate the
config pulls in none of the pipeline."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_gateway.core.bus import LifecycleEvent as LifecycleEvent
    from hermes_gateway.core.commands import CommandInfo as CommandInfo
    from hermes_gateway.core.commands import menu as menu
    from hermes_gateway.core.commands import parse_command as parse_command
    from hermes_gateway.errors import AdapterAuthError as AdapterAuthError
    from hermes_gateway.errors import AdapterError as AdapterError
    from hermes_gateway.errors import CoordinationUnavailable as CoordinationUnavailable
    from hermes_gateway.errors import PeerUnreachable as PeerUnreachable
    from hermes_gateway.errors import PermanentAdapterError as PermanentAdapterError
    from hermes_gateway.errors import RateLimitedError as RateLimitedError
    from hermes_gateway.errors import RequestError as RequestError
    from hermes_gateway.errors import StoreError as StoreError
    from hermes_gateway.errors import TransientAdapterError as TransientAdapterError
    from hermes_gateway.events import Attachment as Attachment
    from hermes_gateway.events import ChatType as ChatType
    from hermes_gateway.events import MessageEvent as MessageEvent
    from hermes_gateway.events import OutboundFile as OutboundFile
    from hermes_gateway.events import OutboundKind as OutboundKind
    from hermes_gateway.events import OutboundMessage as OutboundMessage
    from hermes_gateway.events import without_surrogates as without_surrogates
    from hermes_gateway.platform_spec import MEDIA_MAX_BYTES as MEDIA_MAX_BYTES
    from hermes_gateway.platform_spec import Capabilities as Capabilities
    from hermes_gateway.platform_spec import Limits as Limits
    from hermes_gateway.platform_spec import PlatformSection as PlatformSection
    from hermes_gateway.platform_spec import PlatformSpec as PlatformSpec
    from hermes_gateway.platform_spec import ProbeFailed as ProbeFailed
    from hermes_gateway.platform_spec import token_verdict as token_verdict
    from hermes_gateway.platforms.adapter import AdapterHost as AdapterHost
    from hermes_gateway.platforms.adapter import Health as Health
    from hermes_gateway.platforms.adapter import Leadership as Leadership
    from hermes_gateway.platforms.adapter import Shares as Shares
    from hermes_gateway.platforms.adapter import StreamSink as StreamSink
    from hermes_gateway.platforms.downloader import Downloader as Downloader
    from hermes_gateway.platforms.downloader import LinkRefusedError as LinkRefusedError
    from hermes_gateway.platforms.downloader import Locate as Locate
    from hermes_gateway.platforms.downloader import allowed_url as allowed_url
    from hermes_gateway.platforms.downloader import origins as origins
    from hermes_gateway.platforms.indicator import TypingIndicator as TypingIndicator
    from hermes_gateway.platforms.intake import BotIdentity as BotIdentity
    from hermes_gateway.platforms.intake import Inbound as Inbound
    from hermes_gateway.platforms.intake import Intake as Intake
    from hermes_gateway.platforms.intake import tolerant as tolerant
    from hermes_gateway.platforms.outfile import read_outbound as read_outbound
    from hermes_gateway.platforms.peers import Peers as Peers
    from hermes_gateway.platforms.peers import Whereabouts as Whereabouts
    from hermes_gateway.platforms.preview import LivePreview as LivePreview
    from hermes_gateway.platforms.preview import PreviewBook as PreviewBook
    from hermes_gateway.platforms.preview import PreviewWire as PreviewWire
    from hermes_gateway.platforms.preview import Remember as Remember
    from hermes_gateway.platforms.recent import Recent as Recent
    from hermes_gateway.platforms.reply import PreviewRef as PreviewRef
    from hermes_gateway.platforms.reply import Replier as Replier
    from hermes_gateway.platforms.reply import ReplyWire as ReplyWire
    from hermes_gateway.platforms.reply import Upload as Upload
    from hermes_gateway.platforms.reply import UploadWire as UploadWire
    from hermes_gateway.platforms.retry import header as header
    from hermes_gateway.platforms.retry import retry_after_s as retry_after_s
    from hermes_gateway.platforms.retry import with_retry as with_retry
    from hermes_gateway.platforms.supervisor import Backoff as Backoff
    from hermes_gateway.platforms.supervisor import GiveUp as GiveUp
    from hermes_gateway.platforms.supervisor import RetryLater as RetryLater
    from hermes_gateway.platforms.supervisor import StallWatch as StallWatch
    from hermes_gateway.platforms.supervisor import Supervisor as Supervisor
    from hermes_gateway.platforms.supervisor import first_of as first_of
    from hermes_gateway.platforms.supervisor import hold as hold
    from hermes_gateway.text.jsonbody import body_done as body_done
    from hermes_gateway.text.jsonbody import loads as loads
    from hermes_gateway.text.jsonbody import read_json as read_json
    from hermes_gateway.text.jsonbody import read_object as read_object
    from hermes_gateway.text.markup import parse_blocks as parse_blocks
    from hermes_gateway.text.markup import table_at as table_at
    from hermes_gateway.text.render import CODE_LANG as CODE_LANG
    from hermes_gateway.text.render import RULE_TEXT as RULE_TEXT
    from hermes_gateway.text.render import SAFE_URL as SAFE_URL
    from hermes_gateway.text.render import Block as Block
    from hermes_gateway.text.render import Code as Code
    from hermes_gateway.text.render import CodeBlock as CodeBlock
    from hermes_gateway.text.render import Heading as Heading
    from hermes_gateway.text.render import HtmlStyle as HtmlStyle
    from hermes_gateway.text.render import Inline as Inline
    from hermes_gateway.text.render import Link as Link
    from hermes_gateway.text.render import Paragraph as Paragraph
    from hermes_gateway.text.render import Quote as Quote
    from hermes_gateway.text.render import Rule as Rule
    from hermes_gateway.text.render import Styled as Styled
    from hermes_gateway.text.render import Table as Table
    from hermes_gateway.text.render import Target as Target
    from hermes_gateway.text.render import Text as Text
    from hermes_gateway.text.render import esc_html as esc_html
    from hermes_gateway.text.render import html_block as html_block
    from hermes_gateway.text.render import join_blocks as join_blocks
    from hermes_gateway.text.render import plain as plain
    from hermes_gateway.text.render import split_rendered as split_rendered
    from hermes_gateway.text.render import table_text as table_text
    from hermes_gateway.text.splitter import FENCE_LINE as FENCE_LINE
    from hermes_gateway.text.splitter import fence_closed_by as fence_closed_by
    from hermes_gateway.text.splitter import fence_opened as fence_opened

# name -> the module that defines it
_WHERE: dict[str, str] = {
    "AdapterAuthError": "hermes_gateway.errors",
    "AdapterError": "hermes_gateway.errors",
    "AdapterHost": "hermes_gateway.platforms.adapter",
    "Attachment": "hermes_gateway.events",
    "Backoff": "hermes_gateway.platforms.supervisor",
    "Block": "hermes_gateway.text.render",
    "BotIdentity": "hermes_gateway.platforms.intake",
    "CODE_LANG": "hermes_gateway.text.render",
    "Capabilities": "hermes_gateway.platform_spec",
    "ChatType": "hermes_gateway.events",
    "Code": "hermes_gateway.text.render",
    "CodeBlock": "hermes_gateway.text.render",
    "CommandInfo": "hermes_gateway.core.commands",
    "CoordinationUnavailable": "hermes_gateway.errors",
    "Downloader": "hermes_gateway.platforms.downloader",
    "FENCE_LINE": "hermes_gateway.text.splitter",
    "GiveUp": "hermes_gateway.platforms.supervisor",
    "Heading": "hermes_gateway.text.render",
    "Health": "hermes_gateway.platforms.adapter",
    "Inbound": "hermes_gateway.platforms.intake",
    "Inline": "hermes_gateway.text.render",
    "Intake": "hermes_gateway.platforms.intake",
    "Leadership": "hermes_gateway.platforms.adapter",
    "LifecycleEvent": "hermes_gateway.core.bus",
    "Limits": "hermes_gateway.platform_spec",
    "Link": "hermes_gateway.text.render",
    "LinkRefusedError": "hermes_gateway.platforms.downloader",
    "LivePreview": "hermes_gateway.platforms.preview",
    "Locate": "hermes_gateway.platforms.downloader",
    "MEDIA_MAX_BYTES": "hermes_gateway.platform_spec",
    "MessageEvent": "hermes_gateway.events",
    "OutboundKind": "hermes_gateway.events",
    "OutboundFile": "hermes_gateway.events",
    "OutboundMessage": "hermes_gateway.events",
    "Paragraph": "hermes_gateway.text.render",
    "PeerUnreachable": "hermes_gateway.errors",
    "Peers": "hermes_gateway.platforms.peers",
    "PermanentAdapterError": "hermes_gateway.errors",
    "PlatformSection": "hermes_gateway.platform_spec",
    "PlatformSpec": "hermes_gateway.platform_spec",
    "ProbeFailed": "hermes_gateway.platform_spec",
    "PreviewBook": "hermes_gateway.platforms.preview",
    "PreviewRef": "hermes_gateway.platforms.reply",
    "PreviewWire": "hermes_gateway.platforms.preview",
    "Quote": "hermes_gateway.text.render",
    "RULE_TEXT": "hermes_gateway.text.render",
    "RateLimitedError": "hermes_gateway.errors",
    "Remember": "hermes_gateway.platforms.preview",
    "Replier": "hermes_gateway.platforms.reply",
    "ReplyWire": "hermes_gateway.platforms.reply",
    "read_outbound": "hermes_gateway.platforms.outfile",
    "Upload": "hermes_gateway.platforms.reply",
    "UploadWire": "hermes_gateway.platforms.reply",
    "RequestError": "hermes_gateway.errors",
    "RetryLater": "hermes_gateway.platforms.supervisor",
    "Rule": "hermes_gateway.text.render",
    "SAFE_URL": "hermes_gateway.text.render",
    "Shares": "hermes_gateway.platforms.adapter",
    "StallWatch": "hermes_gateway.platforms.supervisor",
    "StoreError": "hermes_gateway.errors",
    "StreamSink": "hermes_gateway.platforms.adapter",
    "Styled": "hermes_gateway.text.render",
    "Supervisor": "hermes_gateway.platforms.supervisor",
    "Table": "hermes_gateway.text.render",
    "Target": "hermes_gateway.text.render",
    "Text": "hermes_gateway.text.render",
    "TransientAdapterError": "hermes_gateway.errors",
    "TypingIndicator": "hermes_gateway.platforms.indicator",
    "Whereabouts": "hermes_gateway.platforms.peers",
    "allowed_url": "hermes_gateway.platforms.downloader",
    "body_done": "hermes_gateway.text.jsonbody",
    "esc_html": "hermes_gateway.text.render",
    "html_block": "hermes_gateway.text.render",
    "HtmlStyle": "hermes_gateway.text.render",
    "Recent": "hermes_gateway.platforms.recent",
    "fence_closed_by": "hermes_gateway.text.splitter",
    "fence_opened": "hermes_gateway.text.splitter",
    "header": "hermes_gateway.platforms.retry",
    "first_of": "hermes_gateway.platforms.supervisor",
    "hold": "hermes_gateway.platforms.supervisor",
    "join_blocks": "hermes_gateway.text.render",
    "loads": "hermes_gateway.text.jsonbody",
    "menu": "hermes_gateway.core.commands",
    "origins": "hermes_gateway.platforms.downloader",
    "parse_blocks": "hermes_gateway.text.markup",
    "parse_command": "hermes_gateway.core.commands",
    "plain": "hermes_gateway.text.render",
    "read_json": "hermes_gateway.text.jsonbody",
    "read_object": "hermes_gateway.text.jsonbody",
    "retry_after_s": "hermes_gateway.platforms.retry",
    "split_rendered": "hermes_gateway.text.render",
    "table_at": "hermes_gateway.text.markup",
    "table_text": "hermes_gateway.text.render",
    "token_verdict": "hermes_gateway.platform_spec",
    "tolerant": "hermes_gateway.platforms.intake",
    "with_retry": "hermes_gateway.platforms.retry",
    "without_surrogates": "hermes_gateway.events",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain one
    return value
