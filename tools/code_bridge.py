"""The gateway's side of an `execute_code` script's tool calls: a socket pair, length-prefixed
JSON frames, and each call served through the tool registry with the run's own context (its
workspace, its approvals, its stop).

The script holds the other end, inherited as a file descriptor: no path to find, nobody else can
connect. Calls are answered by id on a few threads, so a script may fan out; tools that are not
parallel-safe (terminal, write_file, patch) still run one at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import socket
import struct
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from tools.registry import ToolContext, ToolRegistry

_HEADER = struct.Struct(">I")
MAX_FRAME = 8 * 1024 * 1024  # a call's arguments: write_file content is capped well below
_WORKERS = 4
_LOW_FD = 10  # the sandbox's setup script uses fd 3; keep the script's socket clear of it


class Bridge:
    """One script's channel: `child_fd` goes to the script (pass_fds), `start` serves its calls
    until `close`."""

    def __init__(self, registry: ToolRegistry, ctx: ToolContext, max_calls: int) -> None:
        self.registry = registry
        self.max_calls = max_calls
        self.calls: Counter[str] = Counter()
        self.refused = 0  # calls past the cap
        self._ours, theirs = socket.socketpair()
        self.child_fd = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, _LOW_FD)
        theirs.close()
        self._child_open = True  # closed once: a second close could hit a reused number
        self._closed = threading.Event()
        # a tool a script called stops with the script, and with the run
        self.ctx = replace(ctx, should_stop=lambda: self._closed.is_set() or ctx.should_stop())
        self._send_lock = threading.Lock()
        self._exclusive = threading.Lock()
        self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="hermes-code-call")
        self._thread: threading.Thread | None = None

    def start(self, hello: dict[str, Any]) -> None:
        """Once the script is spawned: close its end here, send the hello, serve its calls."""
        self._close_child_fd()
        self._thread = threading.Thread(
            target=self._serve, args=(hello,), name="hermes-code-bridge", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """After the script ended (or was killed): stop what it started, free the socket. Calls
        still running are told to stop and are not waited for."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._ours.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_child_fd()  # when the spawn failed before `start`
        self._ours.close()

    def _close_child_fd(self) -> None:
        if self._child_open:
            self._child_open = False
            socket.close(self.child_fd)

    def _serve(self, hello: dict[str, Any]) -> None:
        try:
            self._send(hello)
            while not self._closed.is_set():
                frame = _recv(self._ours)
                self._take(frame)
        except (OSError, ValueError):
            # the script ended, or spoke out of turn: hang up, so a call it still makes fails
            # at once instead of waiting for an answer
            with contextlib.suppress(OSError):
                self._ours.shutdown(socket.SHUT_RDWR)

    def _take(self, frame: bytes) -> None:
        message = json.loads(frame)
        if not isinstance(message, dict) or not isinstance(message.get("id"), int):
            raise ValueError("not a call")
        call_id, call = message["id"], message.get("call")
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            self._answer(call_id, False, "a call needs a tool name and arguments")
            return
        name, args = call["tool"], call.get("args", {})
        if self.registry.get(name) is None:
            known = ", ".join(self.registry.names) or "none"
            self._answer(call_id, False, f"{name} is not available to scripts here ({known})")
            return
        if sum(self.calls.values()) >= self.max_calls:
            self.refused += 1
            self._answer(call_id, False, f"this script reached its limit of {self.max_calls} calls")
            return
        self.calls[name] += 1
        self._pool.submit(self._run, call_id, name, args)

    def _run(self, call_id: int, name: str, args: Any) -> None:
        arguments = json.dumps(args) if isinstance(args, dict) else "[]"
        if self.registry.is_parallel_safe(name):
            outcome = self.registry.dispatch(name, arguments, self.ctx)
        else:
            with self._exclusive:
                outcome = self.registry.dispatch(name, arguments, self.ctx)
        text = outcome.content
        if not outcome.ok:
            text = text.removeprefix("Error: ")
        self._answer(call_id, outcome.ok, text)

    def _answer(self, call_id: int, ok: bool, text: str) -> None:
        body = {"id": call_id, "ok": ok, "result" if ok else "error": text}
        with contextlib.suppress(OSError):
            self._send(body)

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        with self._send_lock:
            self._ours.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> bytes:
    size = _HEADER.unpack(_exactly(sock, _HEADER.size))[0]
    if size > MAX_FRAME:
        raise ValueError(f"a frame of {size} bytes")
    return _exactly(sock, size)


def _exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)
