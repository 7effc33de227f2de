"""User hooks: functions subscribed to the bus, named in config or dropped into <home>/hooks.

A hook module defines ``on_<event>(event)`` functions (``on_message_received``...) and/or a
catch-all ``on_event(event)``; a ``"pkg.mod:func"`` entry subscribes one function to every
event (or to ``func.events`` when it has that attribute). Sync or async both work.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from hermes_gateway.core.bus import LIFECYCLE_EVENTS, EventBus, Handler
from hermes_gateway.errors import ConfigError

log = structlog.get_logger("hermes.hooks")


def collect_hooks(entries: Iterable[str], hooks_dir: Path) -> list[tuple[str, Handler, list[str]]]:
    """Import every hook (blocking: call it off the loop). Config entries that fail raise
    `ConfigError`; a broken file in the hooks directory is logged and skipped."""
    found: list[tuple[str, Handler, list[str]]] = []
    for i, entry in enumerate(entries):
        try:
            found.extend(_from_entry(entry))
        except Exception as exc:
            raise ConfigError(f"hooks[{i}]", f"cannot load {entry!r}: {exc}") from None
    if hooks_dir.is_dir():
        for path in sorted(hooks_dir.glob("*.py")):
            try:
                module = _import_file(path)
                found.extend(_from_module(module, f"{path.name}"))
            except Exception:
                log.exception("hooks.load_failed", path=str(path))
    return found


def install_hooks(bus: EventBus, hooks: list[tuple[str, Handler, list[str]]]) -> None:
    for name, handler, events in hooks:
        bus.subscribe(handler, events, name=f"hook:{name}")
        log.info("hooks.installed", hook=name, events=events)


def _from_entry(entry: str) -> list[tuple[str, Handler, list[str]]]:
    module_name, _, attr = entry.partition(":")
    module = importlib.import_module(module_name.strip())
    if not attr:
        return _from_module(module, module_name)
    func: Any = getattr(module, attr.strip())
    if not callable(func):
        raise TypeError(f"{attr} is not callable")
    events = list(getattr(func, "events", None) or LIFECYCLE_EVENTS)
    return [(entry, func, events)]


def _from_module(module: ModuleType, label: str) -> list[tuple[str, Handler, list[str]]]:
    found: list[tuple[str, Handler, list[str]]] = []
    for event_name in LIFECYCLE_EVENTS:
        func = getattr(module, f"on_{event_name}", None)
        if callable(func):
            found.append((f"{label}:on_{event_name}", func, [event_name]))
    catch_all = getattr(module, "on_event", None)
    if callable(catch_all):
        found.append((f"{label}:on_event", catch_all, list(LIFECYCLE_EVENTS)))
    if not found:
        raise ValueError(f"{label} defines no on_<event> or on_event function")
    return found


def _import_file(path: Path) -> ModuleType:
    name = f"hermes_user_hooks.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
