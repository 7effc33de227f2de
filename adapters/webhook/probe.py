"""`hermes doctor`'s check of the webhook routes: each has its secret (the config check says
so first), and each callback URL resolves to addresses the SSRF guard lets it reach."""

from __future__ import annotations

import httpx

from adapters.webhook.settings import WebhookConfig
from hermes_gateway.platforms import ProbeFailed
from tools.errors import ToolError
from tools.ssrf import SsrfGuard


def probe(section: WebhookConfig, http: httpx.Client) -> str:
    guard = SsrfGuard(allowed_networks=section.callback_networks)
    for name, route in section.routes.items():
        if not route.secret:
            raise ProbeFailed(f"route {name}: no secret")
        if "callback" in (route.deliver, route.fallback):
            try:
                guard.pin(httpx.URL(route.callback_url))
            except (ToolError, httpx.InvalidURL) as exc:
                raise ProbeFailed(f"route {name}: callback_url: {exc}") from None
    names = ", ".join(f"{n} ({r.scheme}, to {r.deliver})" for n, r in section.routes.items())
    return f"{len(section.routes)} route(s): {names}"
