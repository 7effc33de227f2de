"""How the Telegram adapter's python-telegram-bot parts are put together (the application, the
poller, the command menu), and how their failures are worded in logs and `/readyz`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from adapters.telegram.http import AiohttpRequest
from adapters.telegram.poller import Poller, Take
from adapters.telegram.settings import TelegramConfig
from adapters.telegram.transport import PollMonitor, PollRequest
from hermes_gateway.platforms import menu
from telegram import Bot, BotCommand
from telegram.error import Conflict, TelegramError
from telegram.ext import Application, ApplicationBuilder

log = structlog.get_logger("hermes.adapters.telegram")
App = Application[Any, Any, Any, Any, Any, Any]
ALLOWED_UPDATES = ["message"]  # ask only for what we handle; the rest is ignored anyway


def bot_commands() -> list[BotCommand]:
    """The gateway's commands as Telegram's command menu (`setMyCommands`) lists them."""
    return [BotCommand(c.name, c.description) for c in menu()]


def build_app(config: TelegramConfig, transport: AiohttpRequest) -> App:
    """The bot's application on our transport. PTB's Updater is not used: `Poller` polls (one
    parse per update, offsets moved only once updates are in the inbox) and the webhook
    handler takes updates itself. The bot's getUpdates request is ours too: PTB's default
    would be an httpx client nothing calls, whose TLS context (the CA bundle read and parsed,
    ~70 ms) was built on the event loop at every start."""
    builder = (
        ApplicationBuilder()
        .token(config.token)
        .base_url(config.base_url)
        .base_file_url(config.base_file_url)
        .request(transport)
        .get_updates_request(transport)
        .updater(None)
    )
    app: App = builder.build()
    return app


def build_poller(
    bot: Bot,
    monitor: PollMonitor,
    take: Take,
    *,
    poll_timeout: float,
    request_timeout: float,
    writable: Callable[[], Awaitable[None]],
    budget: Callable[[], float],
) -> Poller:
    """The long poller on its own small connection pool, reporting into ``monitor``."""
    t = request_timeout
    request = PollRequest(
        monitor,
        connection_pool_size=2,
        read_timeout=t,
        write_timeout=t,
        connect_timeout=t,
        pool_timeout=t,
    )
    return Poller(
        bot,
        request,
        take,
        timeout=poll_timeout,
        read_margin=t,
        allowed_updates=ALLOWED_UPDATES,
        on_error=lambda exc: log_poll_error(monitor.failures, exc),
        writable=writable,
        budget=budget,
    )


def log_poll_error(failures: int, exc: TelegramError) -> None:
    """The first failure of a run, then every 20th: a long outage must not flood the log."""
    if not (failures <= 1 or failures % 20 == 0):
        return
    if isinstance(exc, Conflict):
        hint = "another process is polling this bot token; stop it (or use one gateway)"
        log.error("telegram.conflict", error=str(exc), failures=failures, hint=hint)
    else:
        log.warning("telegram.poll_error", error=f"{type(exc).__name__}: {exc}")


def describe(failures: int, exc: BaseException, wait: float) -> str:
    """`/readyz`'s words for a failed connection attempt."""
    return (
        f"connecting to Telegram (attempt {failures} failed: "
        f"{type(exc).__name__}: {exc}; next in {wait:.1f} s)"
    )
