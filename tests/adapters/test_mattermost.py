"""Mattermost's parts against `FakeMattermost` and on their own: the doctor's token check, the
rate limit headers honoured before a 429 is earned, error bodies translated, odd payloads
skipped, mentions read, and the durable cursor of the catch-up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.mattermost.api import MattermostApi, api_error
from adapters.mattermost.cursor import Cursors
from adapters.mattermost.inbound import Posted, from_event, mentions, normalize, plain_text
from adapters.mattermost.probe import probe
from adapters.mattermost.settings import MattermostConfig
from hermes_gateway.platform_spec import ProbeFailed
from hermes_gateway.platforms import (
    AdapterAuthError,
    BotIdentity,
    PermanentAdapterError,
    RateLimitedError,
)
from tests.fakes.mattermost import ALICE, BOT_ID, TOKEN, FakeMattermost

ME = BotIdentity(BOT_ID, username="hermes")


@pytest.fixture
def mm() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


def test_the_doctor_probe_checks_the_token_with_users_me(mm: FakeMattermost) -> None:
    with httpx.Client(timeout=5) as http:
        assert probe(MattermostConfig(url=mm.url, token=TOKEN), http) == "token valid: @hermes"
        with pytest.raises(ProbeFailed, match="HTTP 401: Invalid or expired session"):
            probe(MattermostConfig(url=mm.url + "/", token="nope"), http)
    assert [c[1] for c in mm.calls] == ["/api/v4/users/me", "/api/v4/users/me"]


async def test_the_rate_limit_headers_are_honoured_before_a_429(mm: FakeMattermost) -> None:
    mm.rate_limit = 2
    api = MattermostApi(mm.url, TOKEN)
    try:
        for _ in range(5):
            assert (await api.me())["id"] == BOT_ID
    finally:
        await api.close()
    assert mm.rate_limited == 0  # it waited out X-Ratelimit-Reset instead


def test_error_bodies_become_the_gateways_errors() -> None:
    def body(status: int, error_id: str, message: str) -> bytes:
        return json.dumps({"id": error_id, "message": message, "status_code": status}).encode()

    limited = api_error(429, body(429, "x", "limit exceeded"), {"Retry-After": "3"}, "GET /x")
    assert isinstance(limited, RateLimitedError) and limited.retry_after == 3
    reset = api_error(429, b"", {"X-Ratelimit-Reset": "2"}, "GET /x")
    assert isinstance(reset, RateLimitedError) and reset.retry_after == 2
    assert isinstance(api_error(401, body(401, "a", "expired"), {}, "GET /x"), AdapterAuthError)
    gone = api_error(404, body(404, "app.post.get.app_error", "Unable"), {}, "PUT /posts/1/patch")
    assert isinstance(gone, PermanentAdapterError)
    assert "app.post.get.app_error" in str(gone)


ODD: list[Any] = [
    None,
    [],
    "posted",
    {"event": "posted"},
    {"event": "posted", "data": None},
    {"event": "posted", "data": {"post": {"id": "not a string"}}},
    {"event": "posted", "data": {"post": "{bad json"}},
    {"event": "posted", "data": {"post": "[1, 2]"}},
    {"event": "posted", "data": {"post": "{}", "mentions": "{bad"}},
    {"event": "typing", "data": {"post": "{}"}},
]


@pytest.mark.parametrize("event", ODD)
def test_odd_events_are_skipped(event: Any) -> None:
    assert from_event(event) is None


@pytest.mark.parametrize(
    "post",
    [
        {},
        {"id": "p1", "channel_id": "c1"},  # no author
        {"id": "p1", "channel_id": "c1", "user_id": "u1", "type": "system_join_channel"},
        {"id": "p1", "channel_id": "c1", "user_id": "u1", "delete_at": 5},
        {"id": 7, "channel_id": ["c"], "user_id": {"u": 1}},
    ],
)
def test_posts_that_are_not_a_users_message_are_ignored(post: dict[str, Any]) -> None:
    assert normalize(Posted(post, "O"), ME, "http://x/api/v4/files", False) is None


def test_a_channel_post_is_a_thread_and_files_are_named() -> None:
    post = {
        "id": "p2",
        "channel_id": "c1",
        "user_id": ALICE,
        "root_id": "p1",
        "message": "@hermes look at this",
        "file_ids": ["f1", 3],
        "metadata": {"files": [{"id": "f1", "name": "a.pdf", "size": 9, "mime_type": "x/pdf"}]},
        "props": {"from_bot": "true"},
    }
    inbound = normalize(Posted(post, "O", "@alice"), ME, "http://x/api/v4/files", False)
    assert inbound is not None and inbound.from_bot and not inbound.from_self
    event = inbound.event
    assert (event.chat_type, event.thread_id, event.reply_to) == ("thread", "p1", "p1")
    assert event.text == "look at this\n[attached file: a.pdf (x/pdf)]"
    assert event.mentioned and event.user_name == "alice"
    assert [(a.file_id, a.size, a.url) for a in event.attachments] == [
        ("f1", 9, "http://x/api/v4/files/f1")
    ]


def test_mentions_are_the_bots_username_as_a_word() -> None:
    assert mentions("hi @hermes.", "hermes") and mentions("@Hermes, hi", "hermes")
    assert not mentions("hi @hermesbot", "hermes") and not mentions("mail x@hermes.org", "hermes")
    assert plain_text("@hermes  what  now", "hermes") == "what now"


async def test_the_cursor_survives_a_restart_and_is_rewound_for_a_post_not_taken(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mattermost" / "cursors.json"
    cursors = Cursors(path, most=2)
    cursors.saw("c1", 1_000, "D")
    cursors.saw("c1", 900, "")  # older: the newest stays
    cursors.saw("c2", 2_000, "O")
    cursors.rewind("c2", 1_500)
    cursors.saw("c3", 3_000, "O")  # past `most`: the least recent channel is forgotten
    await cursors.flush()
    again = Cursors(path, most=2)
    await again.load()
    assert {c: (m.at_ms, m.channel_type) for c, m in again.recent(10, now_ms=3_000).items()} == {
        "c2": (1_500, "O"),
        "c3": (3_000, "O"),
    }
    assert again.recent(1, now_ms=3_000).keys() == {"c3"}
    assert again.newest() == 3_000
