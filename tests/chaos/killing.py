"""Fakes that SIGKILL a gateway the moment they took one of its reply parts, before the gateway
hears back: the window between the platform's OK and the "sent" commit, on each platform."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.chaos.kit import ChaosTelegram
from tests.e2e.daemon import GatewayProcess
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, JsonDict

Hook = Callable[[], None]


def killer(gw: GatewayProcess) -> Hook:
    """What a fake calls once it took the part: the gateway dies before it hears back."""

    def kill() -> None:
        assert gw.proc is not None
        os.kill(gw.proc.pid, signal.SIGKILL)
        gw.proc.wait(10)

    return kill


class Armed:
    """A one-shot trigger on the bot's posts whose text starts with ``prefix``."""

    def __init__(self) -> None:
        self.hook: Hook | None = None
        self.prefix = ""
        self.fired = False

    def arm(self, prefix: str, hook: Hook) -> None:
        self.prefix, self.hook = prefix, hook

    def check(self, posted: str) -> None:
        if self.hook is not None and posted.startswith(self.prefix):
            hook, self.hook = self.hook, None
            self.fired = True
            hook()


class KillingTelegram(ChaosTelegram):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.trigger = Armed()

    async def _send_message(self, p: dict[str, Any]) -> dict[str, Any]:
        message = await super()._send_message(p)
        self.trigger.check(str(p.get("text", "")))
        return message

    async def _send_upload(self, p: dict[str, Any], kind: str) -> dict[str, Any]:
        """A file part: the trigger sees ``file:<its name>``."""
        message = await super()._send_upload(p, kind)
        self.trigger.check(f"file:{self.uploads[-1]['file_name']}")
        return message


class KillingDiscord(FakeDiscord):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.trigger = Armed()

    async def _create_message(self, request: web.Request) -> web.Response:
        response = await super()._create_message(request)
        if self.sent:
            self.trigger.check(str(self.sent[-1].get("content", "")))
        return response


class KillingSlack(FakeSlack):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.trigger = Armed()
        self._methods["chat.postMessage"] = self._post_and_check

    def _post_and_check(self, params: JsonDict) -> JsonDict:
        answer = self._post_message(params)
        self.trigger.check(str(params.get("text", "")))
        return answer

    def _on_upload(self, message: JsonDict) -> None:
        """A file shared: the trigger sees ``file:<its name>``."""
        self.trigger.check(f"file:{message['files'][0]['name']}")
