"""`hermes dashboard`: ask the running gateway for a one-time login link (with the control token),
print it, and open it in a browser when there is a desktop to open it on."""

from __future__ import annotations

import sys
import webbrowser
from typing import TextIO

import httpx

from hermes_gateway.config import Config, desktop_display
from hermes_gateway.control.token import token_path

EXIT_OK = 0
EXIT_FAILURE = 1


def run_dashboard(
    url: str, config: Config, token: str | None, *, opener: str | None, out: TextIO | None = None
) -> int:
    """``token``: the configured control token, else the gateway's generated one (None when
    this user cannot read it): it buys a link that logs a browser in once."""
    out = out or sys.stdout
    base = url.rstrip("/")
    if not config.dashboard.enabled:
        print("hermes: the dashboard is turned off (dashboard.enabled: false)", file=sys.stderr)
        return EXIT_FAILURE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(f"{base}/dashboard-link", headers=headers, timeout=5)
    except httpx.HTTPError as exc:
        print(f"{base}/dashboard/", file=out)
        print(
            f"hermes: the gateway is not answering at {url} ({exc}); "
            "start it with `hermes gateway run`",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if response.status_code != 200:  # no token we can read: the login form takes one
        print(f"{base}/dashboard/", file=out)
        where = (
            "control.token in the config" if config.control.token else token_path(config.home_path)
        )
        print(f"log in with the control token ({where})", file=out)
        link = f"{base}/dashboard/"
    else:
        link = base + response.json()["path"]
        print(link, file=out)
        minutes = int(response.json()["expires_in_s"]) // 60
        print(f"(a one-time login link: it works once, within {minutes} minutes)", file=out)
    if opener is not None and desktop_display():
        webbrowser.open(link)
    return EXIT_OK
