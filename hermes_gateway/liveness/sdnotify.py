"""systemd notifications (READY, WATCHDOG, STOPPING) over `$NOTIFY_SOCKET`, no dependency."""

from __future__ import annotations

import socket

import structlog

log = structlog.get_logger("hermes.sdnotify")


class SystemdNotifier:
    """Sends datagrams to systemd when started under `Type=notify`; a no-op otherwise."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._sock: socket.socket | None = None
        if address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)  # a datagram send must never stall the caller

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, state: str) -> None:
        if self._sock is None or not self.address:
            return
        target = self.address
        if target.startswith("@"):  # abstract namespace socket
            target = "\0" + target[1:]
        try:
            self._sock.sendto(state.encode(), target)
        except OSError as exc:
            log.warning("sdnotify.failed", state=state, error=str(exc))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
