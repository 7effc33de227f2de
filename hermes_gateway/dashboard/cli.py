"""`hermes dashboard`: print the dashboard's URL, say whether the gateway answers there, and
open it in a browser when there is a desktop to open it on."""

from __future__ import annotations

import sys
import webbrowser
from typing import TextIO

import httpx

from hermes_gateway.config import Config, desktop_display

EXIT_OK = 0
EXIT_FAILURE = 1


def run_dashboard(
    url: str, config: Config, *, opener: str | None, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    link = f"{url.rstrip('/')}/dashboard/"
    if not config.dashboard.enabled:
        print("hermes: the dashboard is turned off (dashboard.enabled: false)", file=sys.stderr)
        return EXIT_FAILURE
    print(link, file=out)
    if config.control.token:
        print("log in with the control token (control.token in the config)", file=out)
    try:
        httpx.get(f"{url}/healthz", timeout=3).raise_for_status()
    except httpx.HTTPError as exc:
        print(
            f"hermes: the gateway is not answering at {url} ({exc}); "
            "start it with `hermes gateway run`",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if opener is not None and desktop_display():
        webbrowser.open(link)
    return EXIT_OK
