"""Every platform's command menu is the core's one list (`hermes_gateway.core.commands.MENU`):
each command a platform can carry out is offered, with the same words everywhere."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from adapters.discord.client import HermesClient
from adapters.telegram.build import bot_commands
from hermes_gateway.core.commands import HELP, MENU, Commands, menu, parse_command


class _Events:
    async def on_ready(self) -> None: ...

    async def on_resumed(self) -> None: ...

    async def on_disconnect(self) -> None: ...

    async def on_message(self, message: Any) -> None: ...

    async def on_command(self, interaction: Any, name: str, args: str) -> None: ...


def test_the_core_list_is_what_the_parser_and_help_know() -> None:
    assert {c.name for c in MENU} == Commands.NAMES
    assert len(MENU) == len(Commands.NAMES)  # no name twice
    for c in MENU:
        assert parse_command(f"/{c.name}") == (c.name, "")
        assert f"/{c.name}" in HELP


def test_menus_without_approvals_leave_only_those_out() -> None:
    assert {c.name for c in menu()} - {c.name for c in menu(approvals=False)} == {
        "approve",
        "deny",
    }


def test_telegram_menu_is_the_core_list() -> None:
    assert [(b.command, b.description) for b in bot_commands()] == [
        (c.name, c.description) for c in menu()
    ]


async def test_discord_menu_is_the_core_list() -> None:
    section = SimpleNamespace(guild_ready_timeout_s=2.0, identify_delay_s=0.0)
    client = HermesClient(_Events(), section)  # type: ignore[arg-type]
    try:
        registered = {c.name: c for c in client.tree.get_commands()}
        assert {name: c.description for name, c in registered.items()} == {
            c.name: c.description for c in menu()
        }
        for c in menu():
            options = [p.name for p in getattr(registered[c.name], "parameters", [])]
            assert options == (["message"] if c.argument else [])
    finally:
        await client.close()
