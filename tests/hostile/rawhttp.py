"""Raw HTTP/1.1 over plain sockets, for what a well-behaved client library will not send:
half-sent heads and bodies, non-UTF-8 header bytes, connections held open and never used."""

from __future__ import annotations

import select
import socket
import time


def connect(port: int, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if first:
        sock.sendall(first)
    return sock


def exchange(port: int, raw: bytes, timeout: float = 15) -> tuple[int, bytes]:
    """Send ``raw`` (a whole request, ``Connection: close``) and read the answer to EOF:
    (status, body)."""
    with connect(port) as sock:
        sock.settimeout(timeout)
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def post(path: str, body: bytes, headers: dict[str, bytes] | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    lines.append(b"Content-Type: application/json")
    lines.append(f"Content-Length: {len(body)}".encode())
    lines += [name.encode() + b": " + value for name, value in (headers or {}).items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def closed(sock: socket.socket) -> bool:
    """True once the peer has closed ``sock`` (whatever it answered first is consumed)."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except OSError:
            return True
    return False


def wait_closed(socks: list[socket.socket], timeout: float) -> dict[int, float]:
    """Seconds from now until each socket (by index) was closed by the peer; raises if some
    are still open after ``timeout``."""
    began = time.monotonic()
    when: dict[int, float] = {}
    while len(when) < len(socks):
        for i, sock in enumerate(socks):
            if i not in when and closed(sock):
                when[i] = time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise AssertionError(f"{len(socks) - len(when)} of {len(socks)} still open")
        time.sleep(0.05)
    return when
