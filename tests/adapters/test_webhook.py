"""The webhook platform's parts without a gateway: the template (substitution only, values and
prompt cut to their caps), the signature schemes (constant-time, stale, swapped ids), the
section's checks (`hermes config check`), the doctor's probe of callback URLs, a callback's
failures and a form body."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote

import httpx
import pytest
from aiohttp import web
from pydantic import ValidationError

from adapters.webhook.adapter import _parse
from adapters.webhook.callback import Callbacks
from adapters.webhook.probe import probe
from adapters.webhook.settings import WebhookConfig, WebhookRoute, problems
from adapters.webhook.signing import Unsigned, hermes_header, verify
from adapters.webhook.template import Template, TemplateError
from hermes_gateway.platforms import (
    PermanentAdapterError,
    ProbeFailed,
    RequestError,
    TransientAdapterError,
)
from tests.fakes.server import FakeServer

SECRET = "0123456789abcdef-route-secret"
NOW = 1_700_000_000.0


def render(template: str, payload: object, field_chars: int = 50, prompt_chars: int = 200) -> str:
    extra = {"@route": "ci", "@event": "push", "@delivery": "d1"}
    return Template.parse(template).render(payload, extra, field_chars, prompt_chars)


class TestTemplate:
    def test_fields_lists_specials_and_literal_braces(self) -> None:
        payload = {"a": {"b": [{"c": "deep"}], "n": 3, "t": True}, "s": "x"}
        got = render("{a.b.0.c} {a.n} {a.t} {missing.x} {{ok}} {@route}/{@event}", payload)
        assert got == "deep 3 true  {ok} ci/push"
        assert render("{a}", payload) == '{"b":[{"c":"deep"}],"n":3,"t":true}'
        assert render("{@payload}", [1, 2]) == "[1,2]"

    def test_each_value_and_the_prompt_are_cut(self) -> None:
        assert render("{s}", {"s": "y" * 100}, field_chars=10) == "y" * 9 + "…"
        assert len(render("{a}{b}{c}", {k: "z" * 90 for k in "abc"}, 90, 200)) == 200

    def test_nothing_is_evaluated(self) -> None:
        # what Jinja or str.format would run or look up is text or a refusal here
        for bad in ("{a[0]}", "{a!r}", "{a:>10}", "{ a + 1 }", "{@env}", "{"):
            with pytest.raises(TemplateError):
                Template.parse(bad)
        # a path looks up object keys and list indices only, never an attribute
        assert render("{__class__} {s.__class__} {s.real}", {"s": 1}) == "  "

    def test_a_bad_template_is_a_config_error(self) -> None:
        with pytest.raises(ValidationError, match="unmatched"):
            WebhookRoute(secret=SECRET, template="oops {")


def hermes_headers(body: bytes, delivery: str, stamp: int, secret: str = SECRET) -> dict[str, str]:
    return {
        "X-Hermes-Delivery": delivery,
        "X-Hermes-Signature": hermes_header(secret, stamp, delivery, body),
    }


class TestSigning:
    def test_the_hermes_scheme(self) -> None:
        body = b'{"x": 1}'
        good = hermes_headers(body, "d-1", int(NOW))
        assert verify("hermes", good, body, SECRET, NOW, 300).delivery == "d-1"
        # the same as openssl computes it for the README's sample
        mac = hmac.new(SECRET.encode(), f"{int(NOW)}.d-1.".encode() + body, hashlib.sha256)
        assert good["X-Hermes-Signature"] == f"t={int(NOW)},v1={mac.hexdigest()}"
        cases = {
            "bad signature": (hermes_headers(body, "d-1", int(NOW), "x" * 20), body),
            "stale timestamp": (hermes_headers(body, "d-1", int(NOW) - 301), body),
            "malformed timestamp": ({**good, "X-Hermes-Signature": "v1=ab"}, body),
            "delivery id": ({"X-Hermes-Signature": good["X-Hermes-Signature"]}, body),
        }
        for reason, (headers, data) in cases.items():
            with pytest.raises(Unsigned, match=reason):
                verify("hermes", headers, data, SECRET, NOW, 300)
        swapped = {**good, "X-Hermes-Delivery": "d-2"}  # the id is signed: no new one
        with pytest.raises(Unsigned, match="bad signature"):
            verify("hermes", swapped, body, SECRET, NOW, 300)
        with pytest.raises(Unsigned, match="bad signature"):
            verify("hermes", good, body + b" ", SECRET, NOW, 300)

    def test_the_github_scheme(self) -> None:
        body = b'{"zen": "hi"}'
        mac = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Delivery": "g-1", "X-GitHub-Event": "ping"}
        signed = verify(
            "github", {**headers, "X-Hub-Signature-256": f"sha256={mac}"}, body, SECRET, NOW, 300
        )
        assert (signed.delivery, signed.event) == ("g-1", "ping")
        for given in ("", f"sha1={mac}", "sha256=" + "0" * 64):
            with pytest.raises(Unsigned):
                verify("github", {**headers, "X-Hub-Signature-256": given}, body, SECRET, NOW, 0)


def section(**route: object) -> WebhookConfig:
    return WebhookConfig(enabled=True, routes={"ci": WebhookRoute(**{"secret": SECRET, **route})})


class TestChecks:
    def test_problems(self) -> None:
        assert problems(section()) == []
        assert problems(WebhookConfig(enabled=True))[0][0] == "routes"
        assert problems(section(secret="short"))[0][0] == "routes.ci.secret"
        assert problems(section(deliver="telegram"))[0][0] == "routes.ci.deliver"
        assert problems(section(deliver="webhook:ci"))[0][0] == "routes.ci.deliver"
        assert problems(section(deliver="telegram:42:7")) == []
        refused = section(deliver="callback", callback_url="http://10.0.0.5/hook")
        assert "not public" in problems(refused)[0][1]
        assert problems(section(deliver="callback"))[0][1].startswith("callback_url must be set")
        assert problems(section(fallback="callback", callback_url="http://u:p@example.com/"))
        allowed = refused.model_copy(update={"callback_networks": ("10.0.0.0/8",)})
        assert problems(allowed) == []

    def test_the_probe_resolves_callback_urls_through_the_ssrf_guard(self) -> None:
        loopback = section(deliver="callback", callback_url="http://localhost:9/hook")
        with httpx.Client() as http:
            with pytest.raises(ProbeFailed, match="refused: localhost resolves to"):
                probe(loopback, http)
            allowed = loopback.model_copy(update={"callback_networks": ("127.0.0.0/8", "::1/128")})
            assert probe(allowed, http) == "1 route(s): ci (hermes, to callback)"


class Receiver(FakeServer):
    """Answers each callback POST with the next scripted status."""

    def __init__(self, *statuses: int) -> None:
        super().__init__()
        self.statuses = list(statuses)
        self.app.router.add_post("/hook", self._hook)

    async def _hook(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=self.statuses.pop(0))


async def test_a_callback_failure_is_transient_or_permanent_by_its_cause() -> None:
    receiver = Receiver(500, 429, 404, 302, 200)
    receiver.start()
    allowed = Callbacks(("127.0.0.1/32",))
    try:
        url = f"{receiver.url}/hook"
        for _ in range(2):  # 5xx and 429: offered again later
            with pytest.raises(TransientAdapterError):
                await allowed.post(url, SECRET, "d-1", {"text": "x"})
        for _ in range(2):  # 4xx and a redirect, which is not followed
            with pytest.raises(PermanentAdapterError):
                await allowed.post(url, SECRET, "d-1", {"text": "x"})
        await allowed.post(url, SECRET, "d-1", {"text": "x"})
        # without callback_networks the guard refuses loopback before any connection
        closed = Callbacks(())
        with pytest.raises(PermanentAdapterError, match="refused"):
            await closed.post(url, SECRET, "d-1", {"text": "x"})
        await closed.close()
        assert receiver.statuses == []
    finally:
        await allowed.close()
        receiver.stop()


async def test_a_form_body_is_read_from_its_payload_field() -> None:
    form = "payload=" + quote('{"zen": "hi"}')
    assert await _parse(form.encode(), "application/x-www-form-urlencoded; charset=utf-8") == {
        "zen": "hi"
    }
    with pytest.raises(RequestError):
        await _parse(b"other=1", "application/x-www-form-urlencoded")
    with pytest.raises(RequestError):
        await _parse(b"[[[", "application/json")
