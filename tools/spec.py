"""What a tool module declares (`ToolSpec`): its name, its factory, its settings section and
the host services it uses. Specs are registered under the ``hermes_gateway.tools`` entry point
group, so adding a tool touches no module of the gateway (`tools.catalog` finds them)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from tools.host import HOST_NEEDS

ENTRY_POINT_GROUP = "hermes_gateway.tools"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool, as the module that provides it declares it.

    ``factory`` is a ``"module:function"`` string, imported only when the tool is enabled: the
    spec must live where importing it is cheap (the config validates every installed tool's
    section at start, enabled or not).
    """

    name: str  # the tool's name for the model and in `tools.enabled`
    # "module:function": called with `tools.catalog.ToolSettings` (and the session's other
    # tools as a `ToolRegistry` when `needs` has "tools"); returns the `Tool`
    factory: str
    # the key of its settings under `tools:`; tools may share one (web_search, web_extract)
    section: str | None = None
    settings: type[BaseModel] | None = None  # that section's model (frozen, extra forbidden)
    secrets: tuple[str, ...] = ()  # keys of the section the log redactor must hide
    # the `ToolHost` services its calls may use; the registry hands it no others
    needs: frozenset[str] = frozenset()  # keys of `tools.host.HOST_NEEDS`

    def __post_init__(self) -> None:
        if (self.section is None) != (self.settings is None):
            raise ValueError(f"tool {self.name}: section and settings come together")
        unknown = sorted(set(self.needs) - set(HOST_NEEDS))
        if unknown:
            raise ValueError(f"tool {self.name}: unknown needs {unknown} (of {sorted(HOST_NEEDS)})")
