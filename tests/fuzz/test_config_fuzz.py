"""Fuzzing the config loader: whatever the file holds, `load_config` returns a `Config` or
raises `ConfigError` naming the problem, and `hermes config check` exits 78 with a message,
never a traceback."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_gateway.cli.main import main
from hermes_gateway.config import Config, load_config
from hermes_gateway.errors import ConfigError
from tests.fuzz.strategies import NASTY_TEXT, examples

FUZZ = settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
KEYS = {
    "home": None,
    "runner": ["workers", "busy_policy", "queue_max", "stop_grace_s", "drain_timeout_s"],
    "store": ["url", "replay_max_age_s", "inbox_retention_days"],
    "control": ["host", "port", "token"],
    "model": ["base_url", "api_key", "name", "timeout_s", "max_retries", "stream"],
    "platforms": ["telegram", "discord", "slack", "api"],
    "tools": ["workspace", "enabled", "max_output_chars"],
    "watchdog": ["interval_ms", "warn_ms", "fatal_s"],
    "logging": ["level", "format", "file", "max_bytes"],
    "hooks": None,
}
PLATFORM_KEYS = ["enabled", "token", "allowed_users", "mode", "bot_token", "app_token", "pairing"]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),  # NaN and infinities too
    NASTY_TEXT,
    st.sampled_from(
        [
            "${HOME}",
            "${NOT_SET_ANYWHERE}",
            "${NOT_SET:-fallback}",
            "${EMPTY:-}",
            "${",
            "0.0.0.0",
            "::",
            "queue",
            "interrupt",
            "polling",
            "webhook",
            "~/x",
            "sqlite+aiosqlite:////nonexistent/dir/x.db",
        ]
    ),
    st.lists(st.integers() | NASTY_TEXT, max_size=3),
)


@st.composite
def config_docs(draw: st.DrawFn) -> Any:
    """Mostly config-shaped mappings (real keys, wrong values, stray keys), sometimes junk."""
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUES)
    doc: dict[Any, Any] = {}
    for section in draw(st.lists(st.sampled_from(list(KEYS)), max_size=5, unique=True)):
        keys = KEYS[section]
        if keys is None or draw(st.integers(0, 5)) == 0:
            doc[section] = draw(VALUES)
            continue
        body: dict[str, Any] = {}
        for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
            if section == "platforms":
                names = draw(st.lists(st.sampled_from(PLATFORM_KEYS), max_size=4, unique=True))
                body[key] = {k: draw(VALUES) for k in names}
            else:
                body[key] = draw(VALUES)
        if draw(st.integers(0, 6)) == 0:
            body[draw(NASTY_TEXT)] = draw(VALUES)
        doc[section] = body
    if draw(st.integers(0, 8)) == 0:
        doc[draw(st.integers() | st.booleans())] = 1  # a key that is not a string
    return doc


ENV = {"HOME": "/tmp/fuzz-home", "EMPTY": ""}


def load(tmp_path: Path, text: str) -> Config | ConfigError:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return load_config(path, ENV)
    except ConfigError as exc:
        error = exc
    assert str(error), "a config error must say what is wrong"
    return error


@FUZZ
@given(doc=config_docs())
def test_any_config_shape_loads_or_is_a_config_error(tmp_path: Path, doc: Any) -> None:
    load(tmp_path, yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(text=st.text(max_size=300) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_any_text_loads_or_is_a_config_error(tmp_path: Path, text: str) -> None:
    load(tmp_path, text)


NASTY_FILES = {
    "self-referencing anchor": "a: &x [*x]\n",
    "python tag": "home: !!python/object/apply:os.system ['true']\n",
    "tab indentation": "runner:\n\tworkers: 2\n",
    "not UTF-8": None,  # written as bytes below
    "a directory": None,
    "deep nesting": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "billion laughs": "\n".join(
        ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
        + [
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]"
            for i in range(8)
        ]
    )
    + "\n",
}


@pytest.mark.parametrize("name", list(NASTY_FILES))
def test_nasty_files_are_config_errors_quickly(tmp_path: Path, name: str) -> None:
    path = tmp_path / "config.yaml"
    if name == "not UTF-8":
        path.write_bytes(b"home: \xff\xfe\n")
    elif name == "a directory":
        path.mkdir()
    else:
        path.write_text(NASTY_FILES[name])
    started = time.monotonic()
    with pytest.raises(ConfigError):
        load_config(path, ENV)
    assert time.monotonic() - started < 2


@FUZZ
@given(doc=config_docs())
def test_config_check_exits_0_or_78_without_a_traceback(tmp_path: Path, doc: Any) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["config", "check", "--config", str(path)])
    assert code in (0, 78)
    assert "Traceback" not in err.getvalue()
    if code == 78:
        assert err.getvalue().startswith("hermes: configuration error: ")


def test_the_real_cli_exits_78_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("runner: {workers: -3}\nplatforms: {telegram: {enabled: true}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "config", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 78
    assert proc.stderr.startswith("hermes: configuration error: runner.workers")
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
