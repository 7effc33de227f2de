"""Reading the config file: bounded in size, UTF-8, YAML with duplicate keys refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hermes_gateway.errors import ConfigError

MAX_CONFIG_BYTES = 1024 * 1024  # a real config is a few KB; /dev/zero or a 50 MB file is not


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when present (deep nesting stops at its depth limit in milliseconds
    where the pure-Python loader recursed for a second), with duplicate keys refused: YAML
    would keep the last one silently, and a second ``token:`` is usually a paste mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(str(key), seen[key], line)
                seen[key] = line
            except TypeError:
                pass  # an unhashable key: the constructor below names it
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def read_yaml(path: Path | None) -> Any:
    """The config file's YAML (``{}`` for no file), or a `ConfigError` saying what is wrong."""
    if path is None:
        return {}
    text = _read_text(path)
    try:
        loaded = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise ConfigError(
            exc.key, f"appears twice in the same mapping (lines {exc.first} and {exc.second})"
        ) from None
    except RecursionError:
        raise ConfigError("", f"{path} nests too deeply to be a config") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    return {} if loaded is None else loaded


def _read_text(path: Path) -> str:
    """The file's text, read no further than `MAX_CONFIG_BYTES` (a device or a huge file
    must not take seconds and gigabytes before it is refused)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("", f"{path} is larger than {MAX_CONFIG_BYTES // 1024} KiB: not a config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{path} is not UTF-8 text (byte {exc.start})") from None
