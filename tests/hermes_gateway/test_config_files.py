"""Which files the config comes from: `<home>/config.yaml` by default, secrets from
`<home>/gateway.env` for every command (not only under systemd)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hermes_gateway.config import config_path, load_config, read_env_file, reload_changes


def test_the_default_home_config_is_read_without_hermes_home(tmp_path: Path) -> None:
    (tmp_path / ".hermes").mkdir()
    (tmp_path / ".hermes" / "config.yaml").write_text("model:\n  name: from-home\n")
    env = {"HOME": str(tmp_path)}
    assert config_path(None, env) == tmp_path / ".hermes" / "config.yaml"
    assert load_config(None, env).model.name == "from-home"


def test_gateway_env_fills_references_and_the_environment_wins(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "gateway.env").write_text(
        "# secrets\nMODEL_NAME='from-file'\nexport OPENAI_API_KEY=sk-file\n; note\nBAD LINE\n"
    )
    (home / "config.yaml").write_text(
        "model:\n  name: ${MODEL_NAME}\n  api_key: ${OPENAI_API_KEY}\n"
    )
    env = {"HOME": str(tmp_path), "HERMES_HOME": str(home)}
    config = load_config(None, env)
    assert (config.model.name, config.model.api_key) == ("from-file", "sk-file")
    assert load_config(None, {**env, "MODEL_NAME": "from-env"}).model.name == "from-env"


def test_the_config_file_home_key_locates_gateway_env(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "gateway.env").write_text("MODEL_NAME=via-home-key\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"home: {home}\nmodel:\n  name: ${{MODEL_NAME}}\n")
    assert load_config(path, {"HOME": str(tmp_path)}).model.name == "via-home-key"


def test_env_file_parsing_is_strict_about_names(tmp_path: Path) -> None:
    f = tmp_path / "gateway.env"
    f.write_text("A=\"x y\"\n1BAD=z\nB = spaced \nC=''\n")
    assert read_env_file(f) == {"A": "x y", "B": "spaced", "C": ""}
    assert read_env_file(tmp_path / "missing.env") == {}


def test_config_check_sees_gateway_env_and_names_the_file(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "gateway.env").write_text("TELEGRAM_BOT_TOKEN=123:abc\n")
    (home / "config.yaml").write_text(
        "platforms:\n  telegram:\n    enabled: true\n    token: ${TELEGRAM_BOT_TOKEN}\n"
        "    allow_all: true\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TELEGRAM_BOT_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "config", "check"],
        env={**env, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert str(home / "config.yaml") in result.stdout


def test_config_check_reports_every_problem_with_suggestions(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("runner:\n  workres: 4\n  busy_policy: whatever\nmodle:\n  name: x\n")
    result = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "config", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert any("runner.workres: unknown key (did you mean 'workers'?)" in x for x in lines)
    assert any("modle: unknown key (did you mean 'model'?)" in x for x in lines)
    assert any("runner.busy_policy: must be one of" in x for x in lines)


def test_a_stray_config_yml_is_pointed_out(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yml").write_text("model:\n  name: x\n")
    result = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "config", "check"],
        env={**os.environ, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert "built-in defaults" in result.stdout and "config.yml is not read" in result.stdout


def test_reload_changes_split_what_sighup_takes_from_what_needs_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("platforms:\n  telegram:\n    allowed_users: [1]\n")
    old = load_config(path, {"HOME": str(tmp_path)})
    path.write_text(
        "logging:\n  level: debug\nrunner:\n  workers: 2\n"
        "platforms:\n  telegram:\n    allowed_users: [1, 2]\n    base_url: http://x/bot\n"
    )
    new = load_config(path, {"HOME": str(tmp_path)})
    taken, restart = reload_changes(old, new)
    assert taken == ["logging.level", "platforms.telegram.allowed_users"]
    assert restart == ["platforms.telegram.base_url", "runner.workers"]
    assert reload_changes(new, new) == ([], [])
