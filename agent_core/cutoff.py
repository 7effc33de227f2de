"""Cutting a model request off from another thread: the HTTP transport (`agent_core.wire`)
tells the calling thread's `Call` which socket its request uses, so an interrupt (a `/stop`,
a lost session lease) shuts it at once instead of waiting for the answer or the read timeout."""

from __future__ import annotations

import socket
import threading


class Call:
    """One thread's model request in progress: the socket it uses now, and whether it was
    cut off. Thread-safe; cutting an ended call does nothing (its pooled connection may
    already serve another request)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._ended = False
        self.cut = False

    def using(self, sock: socket.socket) -> None:
        with self._lock:
            if self._ended:
                return
            self._sock = sock
            if self.cut:
                _shut(sock)

    def cut_off(self) -> None:
        with self._lock:
            if self._ended or self.cut:
                return
            self.cut = True
            if self._sock is not None:
                _shut(self._sock)

    def end(self) -> None:
        with self._lock:
            self._ended, self._sock = True, None


calls: dict[int, Call] = {}  # thread ident -> its request in progress


def begin() -> Call:
    """The calling thread's request starts: what `Call.cut_off` will shut."""
    call = calls[threading.get_ident()] = Call()
    return call


def end(call: Call) -> None:
    call.end()
    if calls.get(threading.get_ident()) is call:
        del calls[threading.get_ident()]


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also under TLS: SSLSocket's own would unwrap it under the
    # reading thread's feet; this wakes a blocked recv with EOF, and the reader fails cleanly
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # closed already
