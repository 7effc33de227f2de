"""Tools are found through their specs: the catalog lists exactly the ``hermes_gateway.tools``
entry points, and a toy tool installed beside the gateway (tests/toy_tool, no gateway file names
it) is configured from its own section, imported only when built, and called in a real run
where it sees only the host services its spec needs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from hermes_gateway.config import Config, load_config
from hermes_gateway.errors import ConfigError
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.harness import make_config, running_gateway
from tools import catalog
from tools.catalog import ToolSettings, build_registry, tool_names
from tools.host import ToolHost
from tools.registry import ToolContext
from tools.spec import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]
TOY_SITE = ROOT / "tests" / "toy_tool"


def _forget_toy() -> None:
    for name in [m for m in sys.modules if m.startswith("hermes_toy_tool")]:
        del sys.modules[name]
    catalog.tool_specs.cache_clear()


@pytest.fixture
def toy_installed() -> Iterator[None]:
    """The toy tool's distribution on the path for this test only (the catalog reads the
    entry points again on both sides)."""
    sys.path.insert(0, str(TOY_SITE))
    importlib.invalidate_caches()
    _forget_toy()
    try:
        yield
    finally:
        sys.path.remove(str(TOY_SITE))
        importlib.invalidate_caches()
        _forget_toy()


def load_config_text(tmp_path: Path, yaml_text: str) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    return load_config(path, {"HOME": str(tmp_path)})


def test_the_catalog_lists_exactly_the_entry_point_tools() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    found = sorted(point.name for point in entry_points(group=ENTRY_POINT_GROUP))
    assert list(tool_names()) == found == sorted(declared[ENTRY_POINT_GROUP])
    assert "toy_echo" not in tool_names()


def test_an_installed_tool_is_listed_and_configured_from_its_own_section(
    tmp_path: Path, toy_installed: None
) -> None:
    from hermes_toy_tool import ToyEchoConfig

    found = sorted(point.name for point in entry_points(group=ENTRY_POINT_GROUP))
    assert "toy_echo" in found and list(tool_names()) == found
    config = load_config_text(tmp_path, "tools:\n  enabled: [toy_echo]\n  toy_echo: {times: 2}\n")
    assert config.tools.enabled == ("toy_echo",)
    own = config.tools.sections()["toy_echo"]
    assert isinstance(own, ToyEchoConfig) and own.times == 2 and own.prefix == "toy"
    assert "hermes_toy_tool.tool" not in sys.modules  # validating imported no tool code
    registry = build_registry(["toy_echo"], ToolSettings(sections=config.tools.sections()))
    assert "hermes_toy_tool.tool" in sys.modules
    ctx = ToolContext(workspace=tmp_path, host=ToolHost(search_history=lambda k, q, n: []))
    outcome = registry.dispatch("toy_echo", '{"text": "hi"}', ctx)
    assert outcome.ok and outcome.content == "toy: hi hi (host: search_history)"


@pytest.mark.parametrize(
    ("section", "key", "needle"),
    [
        ("{times: 9}", "tools.toy_echo.times", "less than or equal to 3"),
        ("{colour: red}", "tools.toy_echo.colour", "unknown key"),
    ],
)
def test_a_bad_setting_of_an_installed_tool_names_its_key(
    tmp_path: Path, toy_installed: None, section: str, key: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(tmp_path, f"tools:\n  toy_echo: {section}\n")
    assert caught.value.key == key and needle in str(caught.value)


def test_config_check_exits_78_naming_an_installed_tool_s_bad_key(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("tools:\n  enabled: [toy_echo]\n  toy_echo: {times: 0}\n")
    path = os.pathsep.join(p for p in (str(TOY_SITE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": path}
    command = [sys.executable, "-m", "hermes_gateway", "config", "check", "--config", str(bad)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 78 and "tools.toy_echo.times" in result.stderr, result.stderr


def test_without_the_tool_its_name_and_section_are_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(tmp_path, "tools:\n  toy_echo: {times: 2}\n")
    assert caught.value.key == "tools.toy_echo"
    with pytest.raises(ConfigError, match="unknown tool 'toy_echo'"):
        load_config_text(tmp_path, "tools:\n  enabled: [toy_echo]\n")


def test_the_secrets_the_specs_name_are_redacted(tmp_path: Path, toy_installed: None) -> None:
    yaml_text = "tools:\n  vision: {api_key: sk-vision-1}\n  toy_echo: {token: toy-secret-1}\n"
    assert {"sk-vision-1", "toy-secret-1"} <= set(load_config_text(tmp_path, yaml_text).secrets())


async def test_a_run_calls_the_installed_tool_and_the_model_sees_its_result(
    tmp_path: Path, fake_llm: FakeOpenAI, toy_installed: None
) -> None:
    tools = {"enabled": ["toy_echo", "read_file"], "toy_echo": {"prefix": "echoed", "times": 2}}
    config = make_config(tmp_path, fake_llm.base_url, tools=tools)
    fake_llm.push(tool_calls(("toy_echo", {"text": "ping"}, "call_1")), text("done"))
    async with running_gateway(config) as (_, client):
        reply = await client.chat("echo ping")
    assert reply["status"] == 200 and reply["text"] == "done"
    first, second = fake_llm.requests[-2:]
    assert "toy_echo" in [t["function"]["name"] for t in first["tools"]]
    results = [m for m in second["messages"] if m["role"] == "tool"]
    # the gateway's host offers approvals, attachments, jobs, ...: the toy sees what it needs
    assert [m["content"] for m in results] == ["echoed: ping ping (host: search_history)"]


def test_validating_the_config_imports_no_tool_module(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from hermes_gateway.config import load_config\n"
        f"load_config(None, {{'HOME': {str(tmp_path)!r}}})\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('tools.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the registry and the host's records, but no tool (the web tools pull in an HTML library)
    light = {"tools.builtin", "tools.catalog", "tools.errors", "tools.host", "tools.registry"}
    assert set(out.stdout.split()) <= light | {"tools.spec"}, out.stdout
