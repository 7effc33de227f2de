"""Slack SDK internals the Slack adapter relies on (slack-bolt and slack-sdk, released
together), in one place.

- `AsyncApp._async_middleware_list` (private): bolt has no public way to hand its single-team
  authorization the `auth.test` answer we already have; without it bolt calls `auth.test` on
  the first event, and a failure there drops that event.
- `AsyncBaseSocketModeClient.wss_uri` (a public attribute, but what we rely on is behaviour:
  `connect()` uses a URL set beforehand instead of opening one itself, which would retry a
  rejected app token forever).
"""

from __future__ import annotations

from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)


def seed_auth_test(app: AsyncApp, auth: Any) -> bool:
    """Give bolt's single-team authorization our `auth.test` answer; False when bolt has no
    such middleware (it then calls `auth.test` itself on the first event)."""
    seeded = False
    for middleware in getattr(app, "_async_middleware_list", ()):
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth
            seeded = True
    return seeded


def use_socket_url(client: Any, url: str) -> None:
    """Make the Socket Mode client's next `connect()` use ``url`` (from our own
    `apps.connections.open`)."""
    client.wss_uri = url
