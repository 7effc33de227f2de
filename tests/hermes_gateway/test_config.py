"""`load_config`: the documented example, key-path errors, interpolation, paths, the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hermes_gateway.config import Config, load_config
from hermes_gateway.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.yaml"


def _key_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _key_paths(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "user"
    home.mkdir()
    return {"HOME": str(home)}


@pytest.fixture
def load(tmp_path: Path, env: dict[str, str]) -> Any:
    """Write ``text`` as a config file and load it with ``env`` (plus HOME)."""

    def _load(text: str, extra_env: dict[str, str] | None = None) -> Config:
        path = tmp_path / "config.yaml"
        path.write_text(text, encoding="utf-8")
        return load_config(path, {**env, **(extra_env or {})})

    return _load


class TestExample:
    def test_example_documents_exactly_the_defaults(self, env: dict[str, str]) -> None:
        """Loading the example with an empty environment gives the built-in defaults."""
        assert load_config(EXAMPLE, env) == load_config(None, env)

    def test_every_key_path_is_in_the_example(self) -> None:
        """A key added to `Config` without documenting it in the example fails here."""
        data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
        missing = []
        for path in _key_paths(Config):
            node: Any = data
            for part in path.split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(path)
                    break
                node = node[part]
        assert missing == []
        assert len(list(_key_paths(Config))) > 60  # the walk really recursed

    def test_every_key_has_a_comment(self) -> None:
        lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
        uncommented = [
            line.strip()
            for prev, line in zip(["", *lines], lines, strict=False)
            if re.match(r"^\s*[a-z_]+:\s*\S", line)
            and not prev.strip().startswith("#")
            and " # " not in line
        ]
        assert uncommented == []

    def test_example_secrets_come_from_the_environment(self, env: dict[str, str]) -> None:
        variables = {
            "OPENAI_API_KEY": "k-model",
            "TELEGRAM_BOT_TOKEN": "k-telegram",
            "DISCORD_BOT_TOKEN": "k-discord",
            "SLACK_BOT_TOKEN": "k-slack-bot",
            "SLACK_APP_TOKEN": "k-slack-app",
            "SLACK_SIGNING_SECRET": "k-slack-signing",
        }
        config = load_config(EXAMPLE, {**env, **variables})
        p = config.platforms
        got = [
            config.model.api_key,
            p.telegram.token,
            p.discord.token,
            p.slack.bot_token,
            p.slack.app_token,
            p.slack.signing_secret,
        ]
        assert got == list(variables.values())


class TestKeyErrors:
    @pytest.mark.parametrize(
        ("text", "key"),
        [
            ("bogus: 1\n", "bogus"),
            ("runner:\n  bogus: 1\n", "runner.bogus"),
            ("platforms:\n  telegram:\n    bogus: 1\n", "platforms.telegram.bogus"),
        ],
    )
    def test_unknown_key_at_any_depth(self, load: Any, text: str, key: str) -> None:
        with pytest.raises(ConfigError) as info:
            load(text)
        assert info.value.key == key
        assert str(info.value) == f"{key}: unknown key"

    def test_busy_policy_lists_the_choices(self, load: Any) -> None:
        with pytest.raises(ConfigError) as info:
            load("runner:\n  busy_policy: foo\n")
        assert str(info.value) == (
            "runner.busy_policy: must be one of interrupt, queue, latest, collect, steer"
        )

    @pytest.mark.parametrize(
        ("text", "key"),
        [
            ("runner:\n  workers: many\n", "runner.workers"),
            ("runner:\n  workers: 0\n", "runner.workers"),
            ("control:\n  port: 70000\n", "control.port"),
            ("platforms:\n  telegram:\n    enabled: maybe\n", "platforms.telegram.enabled"),
            ("model: 5\n", "model"),
            ("hooks: [1]\n", "hooks.0"),
        ],
    )
    def test_bad_value_names_the_key(self, load: Any, text: str, key: str) -> None:
        with pytest.raises(ConfigError) as info:
            load(text)
        assert info.value.key == key
        assert str(info.value).startswith(f"{key}: ")

    def test_allowed_users_accept_numbers_and_strings(self, load: Any) -> None:
        config = load("platforms:\n  telegram:\n    allowed_users: [123, '456', ' 789 ']\n")
        assert config.platforms.telegram.allowed_users == ("123", "456", "789")


class TestInterpolation:
    def test_set_variable_is_substituted(self, load: Any) -> None:
        config = load("model:\n  api_key: pre-${KEY}-post\n", {"KEY": "v"})
        assert config.model.api_key == "pre-v-post"

    def test_unset_variable_names_key_and_variable(self, load: Any) -> None:
        with pytest.raises(ConfigError) as info:
            load("model:\n  api_key: ${NOT_THERE}\n")
        assert info.value.key == "model.api_key"
        assert "NOT_THERE" in str(info.value)

    def test_unset_variable_in_a_list_names_the_index(self, load: Any) -> None:
        with pytest.raises(ConfigError) as info:
            load("hooks:\n  - ok.mod\n  - ${NOT_THERE}\n")
        assert info.value.key == "hooks[1]"

    @pytest.mark.parametrize(
        ("extra", "expected"),
        [({}, "dflt"), ({"KEY": ""}, "dflt"), ({"KEY": "set"}, "set")],
        ids=["unset", "empty", "set"],
    )
    def test_default_form(self, load: Any, extra: dict[str, str], expected: str) -> None:
        config = load("model:\n  api_key: ${KEY:-dflt}\n", extra)
        assert config.model.api_key == expected

    def test_empty_variable_without_default_is_empty(self, load: Any) -> None:
        assert load("model:\n  api_key: ${KEY}\n", {"KEY": ""}).model.api_key == ""


class TestPaths:
    def test_tilde_expands_for_home_and_workspace(self, load: Any, env: dict[str, str]) -> None:
        config = load("home: ~/state\ntools:\n  workspace: ~/ws\n")
        assert config.home == f"{env['HOME']}/state"
        assert config.tools.workspace == f"{env['HOME']}/ws"
        assert config.workspace_path == Path(env["HOME"]) / "ws"

    def test_default_home_and_workspace(self, env: dict[str, str]) -> None:
        config = load_config(None, env)
        assert config.home == f"{env['HOME']}/.hermes"
        assert config.tools.workspace is None
        assert config.workspace_path == Path(env["HOME"]) / ".hermes" / "workspace"
        assert config.store_url == f"sqlite+aiosqlite:///{env['HOME']}/.hermes/state.db"

    def test_hermes_home_overrides_home_and_finds_config(
        self, tmp_path: Path, env: dict[str, str]
    ) -> None:
        hermes_home = tmp_path / "hh"
        hermes_home.mkdir()
        (hermes_home / "config.yaml").write_text("home: /elsewhere\nrunner:\n  workers: 3\n")
        config = load_config(None, {**env, "HERMES_HOME": str(hermes_home)})
        assert config.home == str(hermes_home)
        assert config.runner.workers == 3

    def test_hermes_home_with_tilde(self, env: dict[str, str]) -> None:
        config = load_config(None, {**env, "HERMES_HOME": "~/hh"})
        assert config.home == f"{env['HOME']}/hh"

    def test_hermes_home_without_config_file_gives_defaults(
        self, tmp_path: Path, env: dict[str, str]
    ) -> None:
        config = load_config(None, {**env, "HERMES_HOME": str(tmp_path)})
        assert config.runner == load_config(None, env).runner
        assert config.home == str(tmp_path)


class TestSemantics:
    @pytest.mark.parametrize(
        ("text", "key", "var"),
        [
            ("telegram:\n    enabled: true\n", "platforms.telegram.token", "TELEGRAM_BOT_TOKEN"),
            ("discord:\n    enabled: true\n", "platforms.discord.token", "DISCORD_BOT_TOKEN"),
            (
                "slack:\n    enabled: true\n    bot_token: b\n",
                "platforms.slack.app_token",
                "SLACK_APP_TOKEN",
            ),
            (
                "slack:\n    enabled: true\n    mode: http\n    bot_token: b\n",
                "platforms.slack.signing_secret",
                "SLACK_SIGNING_SECRET",
            ),
        ],
    )
    def test_enabled_platform_needs_its_secret(
        self, load: Any, text: str, key: str, var: str
    ) -> None:
        with pytest.raises(ConfigError) as info:
            load("platforms:\n  " + text)
        assert info.value.key == key
        assert var in str(info.value)

    def test_whitespace_token_counts_as_empty(self, load: Any) -> None:
        with pytest.raises(ConfigError, match=r"platforms\.telegram\.token"):
            load("platforms:\n  telegram:\n    enabled: true\n    token: '  '\n")

    def test_platform_secret_from_the_environment(self, load: Any) -> None:
        config = load("platforms:\n  telegram:\n    enabled: true\n", {"TELEGRAM_BOT_TOKEN": "t"})
        assert config.platforms.telegram.token == "t"

    def test_public_control_host_needs_a_token(self, load: Any) -> None:
        with pytest.raises(ConfigError) as info:
            load("control:\n  host: 0.0.0.0\n")
        assert info.value.key == "control.token"

    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5"])
    def test_public_control_host_with_token(self, load: Any, host: str) -> None:
        config = load(f"control:\n  host: '{host}'\n  token: s3cret-0123456789abcdef\n")
        assert config.control.token == "s3cret-0123456789abcdef"

    @pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
    def test_loopback_host_needs_no_token(self, load: Any, host: str) -> None:
        assert load(f"control:\n  host: '{host}'\n").control.host == host


class TestFileErrors:
    def test_invalid_yaml_mentions_the_line(self, load: Any) -> None:
        with pytest.raises(ConfigError, match=r"not valid YAML \(line 3, column \d+\)"):
            load("runner:\n  workers: 8\n  busy_policy: a: b\nstore: {}\n")

    def test_non_mapping_file(self, load: Any) -> None:
        with pytest.raises(ConfigError, match="must be a mapping"):
            load("- 1\n- 2\n")

    def test_empty_file_gives_defaults(self, load: Any, env: dict[str, str]) -> None:
        assert load("") == load_config(None, env)

    def test_missing_file(self, tmp_path: Path, env: dict[str, str]) -> None:
        with pytest.raises(ConfigError, match=r"cannot read config file .*nope\.yaml"):
            load_config(tmp_path / "nope.yaml", env)

    def test_non_string_key(self, load: Any) -> None:
        with pytest.raises(ConfigError) as info:
            load("runner:\n  1: 2\n")
        assert info.value.key == "runner.1"

    @pytest.mark.parametrize(
        "text", ["a: &x [*x]\n", "a: " + "[" * 1000 + "]" * 1000 + "\n"], ids=["alias", "deep"]
    )
    def test_recursive_yaml_is_a_config_error(self, load: Any, text: str) -> None:
        with pytest.raises(ConfigError):
            load(text)


def _hermes(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "hermes_gateway", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


class TestCli:
    def test_config_check_bad_file_exits_78_naming_the_key(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.yaml"
        bad.write_text("runner:\n  queue_max: -1\n")
        result = _hermes(["config", "check", "--config", str(bad)], tmp_path)
        assert result.returncode == 78
        assert "runner.queue_max" in result.stderr

    def test_config_check_good_file_exits_0(self, tmp_path: Path) -> None:
        result = _hermes(["config", "check", "--config", str(EXAMPLE)], tmp_path)
        assert result.returncode == 0, result.stderr
        assert "config OK" in result.stdout


_KEYS = st.sampled_from(
    ["home", "runner", "workers", "busy_policy", "platforms", "telegram", "enabled", "token",
     "control", "host", "model", "api_key", "hooks", "tools", "workspace", "allowed_users"]
)  # fmt: skip
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["${UNSET}", "${UNSET:-x}", "~", "~/x", "0.0.0.0", "interrupt", "${X"])
)
_TREES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_KEYS | st.text(max_size=6) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.dictionaries(_KEYS, _TREES, max_size=5) | _TREES)
def test_random_documents_raise_only_config_error(data: Any) -> None:
    """Whatever the file holds, the only exception out of `load_config` is `ConfigError`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        try:
            config = load_config(path, {"HOME": tmp})
        except ConfigError:
            return
        assert isinstance(config, Config)
