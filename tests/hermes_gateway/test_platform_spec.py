"""Platforms are found through their specs: the built-in ones are entry points like any other,
their packages import no SDK, the config's `platforms:` section, its environment defaults and
its secrets come from the specs, and no module of the gateway names a platform."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.slack.settings import SlackConfig
from hermes_gateway.config import Config, ConfigError, load_config
from hermes_gateway.logs import Redactor
from hermes_gateway.platform_spec import (
    PlatformSection,
    PlatformSpec,
    capabilities,
    load_ref,
    platform_spec,
    platform_specs,
)
from tests.source_tree import parse

ROOT = Path(__file__).resolve().parents[2]
# what importing every spec package must not import: the SDKs, the adapters, the SSRF guard
HEAVY = (
    "telegram",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "tools.ssrf",
    "aioimaplib",
    "aiosmtplib",
    "mautrix",
)


def test_the_built_in_platforms_are_discovered_in_order() -> None:
    specs = platform_specs()
    names = [s.name for s in specs]
    assert names[:4] == ["api", "telegram", "discord", "slack"]  # then the added ones
    packages = [p.name for p in (ROOT / "adapters").iterdir() if (p / "__init__.py").exists()]
    # every platform package is registered (the email platform's package is `mail`)
    declared = {load_ref(f"adapters.{p}:SPEC").name for p in packages if p != "shims"}
    assert set(names) == declared
    assert all(isinstance(s, PlatformSpec) for s in specs)
    for spec in specs:  # the lazy references resolve
        assert callable(load_ref(spec.adapter))
        assert spec.probe is None or callable(load_ref(spec.probe))


def test_spec_packages_import_no_sdk() -> None:
    code = (
        "import sys; from hermes_gateway.platform_spec import platform_specs; platform_specs(); "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)"
        " + sorted(m for m in sys.modules if m.endswith('.adapter') and m.startswith('adapters.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_config_is_built_from_the_specs() -> None:
    config = Config()
    for spec in platform_specs():
        assert isinstance(getattr(config.platforms, spec.name), spec.section)
    assert config.platforms.section("slack", SlackConfig).mode == "socket"
    with pytest.raises(TypeError):
        config.platforms.section("api", SlackConfig)
    # a platform with access rules shares the base; the local API has none
    assert isinstance(config.platforms.section("telegram", PlatformSection), PlatformSection)
    assert not isinstance(config.platforms.api, PlatformSection)


def test_secrets_default_to_the_variables_the_specs_name(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("platforms:\n  slack: {enabled: true, mode: http}\n")
    env = {"HOME": str(tmp_path), "SLACK_BOT_TOKEN": "xoxb-1234", "SLACK_SIGNING_SECRET": "s3cret"}
    config = load_config(path, env)
    assert config.platforms.section("slack", SlackConfig).bot_token == "xoxb-1234"
    assert {"xoxb-1234", "s3cret"} <= set(config.secrets())
    with pytest.raises(ConfigError, match=r"platforms\.slack\.signing_secret.*SLACK_SIGNING"):
        load_config(path, {"HOME": str(tmp_path), "SLACK_BOT_TOKEN": "xoxb-1234"})


def test_a_spec_names_secret_values_beyond_its_keys_for_the_redactor(tmp_path: Path) -> None:
    """A webhook route's secret, one per route, is hidden in logs like every other secret."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "platforms:\n  webhook:\n    enabled: true\n    routes:\n"
        "      ci:\n        secret: ${CI_HOOK_SECRET}\n        deliver: log\n"
    )
    config = load_config(path, {"HOME": str(tmp_path), "CI_HOOK_SECRET": "route-secret-0123456789"})
    assert "route-secret-0123456789" in config.secrets()
    line = Redactor(config.secrets())("signed with route-secret-0123456789")
    assert line == "signed with ***"


def test_capabilities_replace_names() -> None:
    assert capabilities("api").can_ask_approval is False
    assert capabilities("telegram").can_ask_approval is True
    assert capabilities("no-such-platform").can_ask_approval is True
    spec = platform_spec("slack")
    assert spec is not None and spec.capabilities.can_react and spec.limits.message_chars


def test_no_gateway_module_names_a_platform() -> None:
    """Adding a platform touches no module of the gateway: none spells a platform's name."""
    names = {spec.name for spec in platform_specs()}
    offenders = []
    for path in (ROOT / "hermes_gateway").rglob("*.py"):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Constant) and node.value in names:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
            elif isinstance(node, ast.Attribute) and node.attr in names and not _stdlib(node):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert offenders == []


def _stdlib(node: ast.Attribute) -> bool:
    """``signal.signal``: the standard library's function, not the Signal platform."""
    return isinstance(node.value, ast.Name) and node.value.id == node.attr == "signal"


class _Point:
    def __init__(self, name: str, value: object) -> None:
        self.name, self.value, self._value = name, "pkg:SPEC", value

    def load(self) -> object:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([], "no platform is installed"),
        ([_Point("x", object())], "is not the PlatformSpec named 'x'"),
        ([_Point("x", ImportError("no module named sdk"))], "x .* cannot be loaded: no module"),
    ],
)
def test_a_broken_install_is_named(
    monkeypatch: pytest.MonkeyPatch, points: list[_Point], message: str
) -> None:
    import hermes_gateway.platform_spec as module

    monkeypatch.setattr(module, "entry_points", lambda group: points)
    with pytest.raises(RuntimeError, match=message):
        module.platform_specs.__wrapped__()
