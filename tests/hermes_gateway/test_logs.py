"""The log pipeline: JSON lines on disk and stderr, bound context kept, every secret redacted."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.config import Config
from hermes_gateway.logs import (
    _GENERIC_TOKENS,
    _PREFIXED_TOKENS,
    Redactor,
    configure_logging,
    literal_of,
)
from hermes_gateway.platform_spec import platform_specs

MODEL_SECRET = "model-secret-7f3a9c"
TELEGRAM_SECRET = "tg-config-secret-Q8w2"
CONTROL_SECRET = "ctl-secret-M4n7"
# shaped like real tokens but in no config: the pattern redactor must catch them
LOOSE_TELEGRAM = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
LOOSE_OPENAI = "sk-proj-abcdefghijklmnop1234"
LOOSE_SLACK = "xoxb-1234-5678-abcdefgh"
LOOSE_BEARER = "eyJhbGciOi.payload.signature"
SECRETS = [
    MODEL_SECRET,
    TELEGRAM_SECRET,
    CONTROL_SECRET,
    LOOSE_TELEGRAM,
    LOOSE_OPENAI,
    LOOSE_SLACK,
    LOOSE_BEARER,
]
NOISY = ("httpx", "httpcore", "aiohttp.access", "hpack", "websockets")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, noisy_level in noisy.items():
        logging.getLogger(name).setLevel(noisy_level)
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()


def _config(home: Path, **overrides: Any) -> Config:
    data: dict[str, Any] = {
        "home": str(home),
        "model": {"api_key": MODEL_SECRET},
        "platforms": {"telegram": {"token": TELEGRAM_SECRET}},
        "control": {"token": CONTROL_SECRET},
        "logging": {"format": "json"},
    }
    data.update(overrides)
    return Config.model_validate(data)


def _emit_everything() -> None:
    log = structlog.get_logger("hermes.test")
    structlog.contextvars.bind_contextvars(session_key="telegram:dm:42")
    log.info("model.request", api_key=MODEL_SECRET, url=f"https://x.test/{TELEGRAM_SECRET}")
    try:
        raise RuntimeError(f"control auth failed with {CONTROL_SECRET}")
    except RuntimeError:
        logging.getLogger("hermes.control").exception("control.failed")
    log.debug("hidden.debug_line")
    logging.getLogger("httpx").warning(
        "HTTP Request failed: %s", f"https://api.example.test/{TELEGRAM_SECRET}/getMe"
    )
    logging.getLogger("httpx").info("HTTP Request: GET https://quiet.test")  # below WARNING
    logging.getLogger("hermes.adapter").warning("token=%s bad", LOOSE_TELEGRAM)
    log.warning(
        "loose.tokens",
        detail=f"openai {LOOSE_OPENAI} slack {LOOSE_SLACK}",
        header=f"Authorization: Bearer {LOOSE_BEARER}",
    )
    structlog.contextvars.clear_contextvars()

    def worker() -> None:
        structlog.contextvars.bind_contextvars(session_key="slack:dm:D1", run_id="r9")
        logging.getLogger("slack_sdk").error("socket closed for %s", LOOSE_SLACK)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()


def _read_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _by_event(lines: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    matches = [line for line in lines if line["event"].startswith(prefix)]
    assert len(matches) == 1, (prefix, lines)
    return matches[0]


class TestPipeline:
    def test_json_lines_with_events_and_context(self, tmp_path: Path) -> None:
        stream = io.StringIO()
        sink = configure_logging(_config(tmp_path), stream=stream)
        _emit_everything()
        sink.stop()
        assert sink.path == tmp_path / "logs" / "gateway.log"
        lines = _read_lines(sink.path)
        events = [line["event"] for line in lines]
        assert events == [
            "model.request",
            "control.failed",
            "HTTP Request failed: https://api.example.test/***/getMe",
            "token=*** bad",
            "loose.tokens",
            "socket closed for ***",
        ]
        request = _by_event(lines, "model.request")
        assert request["session_key"] == "telegram:dm:42"
        assert (request["level"], request["logger"]) == ("info", "hermes.test")
        assert request["api_key"] == "***"
        assert "timestamp" in request
        failed = _by_event(lines, "control.failed")
        assert failed["exception"].startswith("Traceback (most recent call last):")
        assert failed["exception"].endswith("RuntimeError: control auth failed with ***")
        httpx = _by_event(lines, "HTTP Request failed")
        assert (httpx["level"], httpx["logger"]) == ("warning", "httpx")
        assert httpx["session_key"] == "telegram:dm:42"  # foreign record, caller's context
        assert _by_event(lines, "token=")["session_key"] == "telegram:dm:42"
        threaded = _by_event(lines, "socket closed")
        assert (threaded["session_key"], threaded["run_id"]) == ("slack:dm:D1", "r9")
        assert threaded["logger"] == "slack_sdk"
        # stderr got the same JSON lines, timestamps included (taken when logged)
        stderr_lines = [json.loads(x) for x in stream.getvalue().splitlines()]
        assert stderr_lines == lines

    def test_no_secret_reaches_file_or_stderr(self, tmp_path: Path) -> None:
        stream = io.StringIO()
        sink = configure_logging(_config(tmp_path), stream=stream)
        _emit_everything()
        sink.stop()
        assert sink.path is not None
        raw = sink.path.read_text(encoding="utf-8")
        decoded = json.dumps(_read_lines(sink.path), ensure_ascii=False)
        for text in (raw, decoded, stream.getvalue()):
            leaked = [secret for secret in SECRETS if secret in text]
            assert leaked == []
        assert raw.count("***") >= len(SECRETS)

    def test_console_format_is_redacted_too(self, tmp_path: Path) -> None:
        stream = io.StringIO()
        config = _config(tmp_path, logging={"format": "console", "file": False})
        sink = configure_logging(config, stream=stream)
        structlog.get_logger("hermes.test").info("hello", key=MODEL_SECRET, other=LOOSE_OPENAI)
        sink.stop()
        out = stream.getvalue()
        assert sink.path is None
        assert "hello" in out
        assert MODEL_SECRET not in out
        assert LOOSE_OPENAI not in out
        assert not (tmp_path / "logs").exists()

    def test_level_filter(self, tmp_path: Path) -> None:
        stream = io.StringIO()
        sink = configure_logging(_config(tmp_path, logging={"level": "debug"}), stream=stream)
        structlog.get_logger("hermes.test").debug("visible.debug_line")
        sink.stop()
        assert sink.path is not None
        assert [line["event"] for line in _read_lines(sink.path)] == ["visible.debug_line"]

    def test_stdlib_record_keeps_its_creation_time(self, tmp_path: Path) -> None:
        sink = configure_logging(_config(tmp_path), io.StringIO())
        record = logging.makeLogRecord(
            {"name": "httpx", "levelno": logging.WARNING, "levelname": "WARNING",
             "msg": "late", "created": 978307200.0}  # 2001-01-01T00:00:00Z
        )  # fmt: skip
        logging.getLogger("httpx").handle(record)
        sink.stop()
        assert sink.path is not None
        (line,) = _read_lines(sink.path)
        assert line["timestamp"].startswith("2001-01-01T00:00:00")

    def test_structlog_exception_keeps_its_traceback(self, tmp_path: Path) -> None:
        sink = configure_logging(_config(tmp_path), io.StringIO())
        try:
            raise RuntimeError(f"auth failed with {CONTROL_SECRET}")
        except RuntimeError:
            structlog.get_logger("hermes.test").exception("control.failed")
        sink.stop()
        assert sink.path is not None
        (line,) = _read_lines(sink.path)
        assert line["exception"].endswith("RuntimeError: auth failed with ***")

    def test_non_ascii_secret_is_redacted(self, tmp_path: Path) -> None:
        secret = "pässwort-geheim-1"
        sink = configure_logging(_config(tmp_path, control={"token": secret}), io.StringIO())
        structlog.get_logger("hermes.test").info("auth", token=secret)
        sink.stop()
        assert sink.path is not None
        decoded = json.dumps(_read_lines(sink.path), ensure_ascii=False)
        assert secret not in decoded


class TestRedactor:
    def test_known_secrets_longest_first(self) -> None:
        redact = Redactor(["abcd", "abcdefgh"])
        assert redact("x abcdefgh y abcd") == "x *** y ***"

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            (f"t {LOOSE_TELEGRAM} x", "t *** x"),
            (f"k={LOOSE_OPENAI}", "k=***"),
            (f"{LOOSE_SLACK} and xapp-1-A0-123456789", "*** and ***"),
            (f"Authorization: Bearer {LOOSE_BEARER}", "Authorization: Bearer ***"),
            ("Authorization: Bot " + "M" * 24 + ".Gx." + "a" * 27, "Authorization: Bot ***"),
            ("nothing to hide: 12:34, sk-short", "nothing to hide: 12:34, sk-short"),
        ],
    )
    def test_token_shapes(self, text: str, expected: str) -> None:
        assert Redactor()(text) == expected

    def test_telegram_token_inside_a_bot_url(self) -> None:
        url = f"https://api.telegram.org/bot{LOOSE_TELEGRAM}/getMe"
        assert LOOSE_TELEGRAM not in Redactor()(url)

    def test_discord_interaction_tokens(self) -> None:
        """In the URLs discord.py logs at debug (callback, followup, @original), and bare."""
        token = "Xk3_" + "q" * 40
        base = "https://discord.com/api/v10"
        urls = [
            f"POST {base}/interactions/1234567/{token}/callback with None has returned 204",
            f"Webhook ID 1000 with POST {base}/webhooks/1000/{token}?wait=true has returned 200",
            f"PATCH {base}/webhooks/1000/{token}/messages/@original",
        ]
        for line in urls:
            redacted = Redactor()(line)
            assert token not in redacted
            assert "/***" in redacted
        real = "aW50ZXJhY3Rpb246OjEyMzQ1Njc4OTAxMjM0NTY3ODk6" + "Ab-_" * 20
        assert Redactor()(f"token={real} end") == "token=*** end"

    def test_token_keys_in_payloads(self) -> None:
        """discord.py logs gateway payloads (a dict repr) at debug; JSON log lines escape."""
        token = "I2TuOC0_VfEfSGxJGQSYjDLU"
        for line in (
            f"WebSocket Event: {{'id': '1', 'token': '{token}', 'version': 1}}",
            json.dumps({"event": json.dumps({"token": token, "n": 1})}),
            json.dumps({"event": repr((json.dumps({"ctx": json.dumps({"token": token})}),))}),
        ):
            redacted = Redactor()(line)
            assert token not in redacted
            assert "token" in redacted and "***" in redacted


class TestRotation:
    """The file rotates by the size it counts as it writes, and each record is rendered once
    for stderr and the file together."""

    def _lines(self, sink_path: Path) -> list[Path]:
        return sorted(sink_path.parent.glob("gateway.log*"))

    def test_rotates_before_passing_max_bytes(self, tmp_path: Path) -> None:
        config = _config(tmp_path, logging={"format": "json", "max_bytes": 4096, "backups": 2})
        sink = configure_logging(config, io.StringIO())
        log = structlog.get_logger("hermes.test")
        for n in range(200):
            log.info("filler.line", n=n, pad="x" * 60)
        sink.stop()
        assert sink.path is not None
        files = self._lines(sink.path)
        assert [f.name for f in files] == ["gateway.log", "gateway.log.1", "gateway.log.2"]
        for f in files:
            assert 0 < f.stat().st_size <= 4096
        newest = _read_lines(sink.path)
        assert newest[-1]["n"] == 199  # the latest lines are in the current file, whole
        kept = [line["n"] for f in reversed(files) for line in _read_lines(f)]
        assert kept == sorted(kept) and kept[-1] == 199

    def test_an_existing_file_counts_from_its_size(self, tmp_path: Path) -> None:
        config = _config(tmp_path, logging={"format": "json", "max_bytes": 2048, "backups": 1})
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "gateway.log").write_text("y" * 2000 + "\n", encoding="utf-8")
        sink = configure_logging(config, io.StringIO())
        structlog.get_logger("hermes.test").info("after.restart", pad="x" * 100)
        sink.stop()
        assert (logs / "gateway.log.1").read_text(encoding="utf-8").startswith("y" * 2000)
        assert _read_lines(logs / "gateway.log")[0]["event"] == "after.restart"

    def test_no_backups_means_no_rotation(self, tmp_path: Path) -> None:
        config = _config(tmp_path, logging={"format": "json", "max_bytes": 1024, "backups": 0})
        sink = configure_logging(config, io.StringIO())
        for n in range(50):
            structlog.get_logger("hermes.test").info("filler.line", n=n, pad="x" * 60)
        sink.stop()
        assert sink.path is not None
        assert [f.name for f in self._lines(sink.path)] == ["gateway.log"]
        assert len(_read_lines(sink.path)) == 50

    def test_each_record_is_rendered_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rendered: list[str] = []
        original = Redactor.__call__

        def counting(self: Redactor, text: str) -> str:
            rendered.append(text)
            return original(self, text)

        monkeypatch.setattr(Redactor, "__call__", counting)
        stream = io.StringIO()
        sink = configure_logging(_config(tmp_path), stream)
        structlog.get_logger("hermes.test").info("once.only", key=MODEL_SECRET)
        sink.stop()
        assert sink.path is not None
        assert len([t for t in rendered if "once.only" in t]) == 1
        assert _by_event(_read_lines(sink.path), "once.only")["key"] == "***"
        assert '"event": "once.only"' in stream.getvalue()
        assert MODEL_SECRET not in stream.getvalue()


_SHAPES = [*_GENERIC_TOKENS, *(p for spec in platform_specs() for p in spec.token_patterns)]
_EVERY_SHAPE = re.compile("|".join(_SHAPES))
_FRAGMENTS = st.sampled_from(
    [
        *("sk-", "xoxb-", "xoxp-", "xapp-", "EAA", "syt_", "MDAx", "aW50ZXJhY3Rpb246"),
        *("Bearer ", "Bot ", "/webhooks/", "/interactions/", "123/", "token"),
        *('"token": "', "'token': '", '\\"token\\": \\"', "123456789:", ":", " ", "."),
    ]
)
_TOKEN_CHARS = st.text("AaZz09_-.~+/=", max_size=45)


def _all_shapes_at_once(text: str) -> str:
    """The redaction as it was before shapes were left out of a line without their literal."""
    text = _PREFIXED_TOKENS.sub(lambda m: f"{m[1] or m[2]}***", text)
    return _EVERY_SHAPE.sub("***", text)


class TestRedactorShortcut:
    def test_the_literal_of_each_installed_shape(self) -> None:
        found = {p: literal_of(p) for p in _SHAPES}
        assert found[r"\bsk-[A-Za-z0-9_-]{16,}"] == "sk-"
        assert found[r"(?<=Bearer )[A-Za-z0-9._~+/=-]{8,}"] == "Bearer "
        assert found[r"(?<![0-9])\d{6,12}:[A-Za-z0-9_-]{30,}"] is None  # no literal first
        assert found[r"\bxox[abprs]-[A-Za-z0-9-]{8,}"] == "xox"
        assert all(m is None or re.escape(m) in p or m in p for p, m in found.items())

    @pytest.mark.parametrize(
        ("pattern", "literal"),
        [
            ("abc[0-9]+", "abc"),
            ("abc?d", "ab"),  # the c may be absent
            ("ab{2}", None),
            ("a.b", None),
            ("ab|cd", None),
            ("(?i)token", None),
            ("(?x)a b c", None),
            ("(?<=x|y)z", None),
            ("(?<=key=)[a-z]+", "key="),
            ("[a-z]xyz", None),
            ("^xyz", None),
        ],
    )
    def test_a_literal_is_read_only_when_it_is_plain(
        self, pattern: str, literal: str | None
    ) -> None:
        assert literal_of(pattern) == literal

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.one_of(_FRAGMENTS, _TOKEN_CHARS), max_size=12).map("".join))
    def test_a_line_is_redacted_as_by_every_shape_at_once(self, text: str) -> None:
        assert Redactor()(text) == _all_shapes_at_once(text)
