"""The agent's tools inside an `execute_code` script: each function sends its call to the
gateway over the socket it was given and returns the tool's text output.

Standard library only: this runs in the script's interpreter, never in the gateway. A call the
tool refuses (bad arguments, a denied approval, a limit) raises `ToolError` with the reason.
"""

from __future__ import annotations

import builtins
import itertools
import json
import linecache
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct(">I")
_MAX_FRAME = 64 * 1024 * 1024
__all__ = ["ToolError"]


class ToolError(Exception):
    """The tool did not do what was asked; the message says why."""


class _Channel:
    """Calls by id over one socket: several threads may call at once, one reader sorts the
    answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ids = itertools.count(1)
        self.send_lock = threading.Lock()
        self.cond = threading.Condition()
        self.answers: dict[int, dict[str, Any] | None] = {}
        self.closed = False
        self.reader: threading.Thread | None = None

    def call(self, tool: str, args: dict[str, Any]) -> str:
        payload = json.dumps({"tool": tool, "args": args})  # TypeError for what JSON cannot hold
        with self.cond:
            n = next(self.ids)
            self.answers[n] = None
            if self.reader is None:
                self.reader = threading.Thread(target=self._read, daemon=True)
                self.reader.start()
        try:
            with self.send_lock:
                _send(self.sock, f'{{"id": {n}, "call": {payload}}}'.encode())
        except OSError:
            with self.cond:
                self.closed = True
        with self.cond:
            while self.answers[n] is None and not self.closed:
                self.cond.wait()
            answer = self.answers.pop(n)
        if answer is None:
            raise ToolError(f"{tool}: the gateway closed the connection")
        if not answer.get("ok"):
            raise ToolError(str(answer.get("error", "failed")))
        return str(answer.get("result", ""))

    def _read(self) -> None:
        try:
            while True:
                answer = json.loads(_recv(self.sock))
                with self.cond:
                    if answer.get("id") in self.answers:
                        self.answers[answer["id"]] = answer
                    self.cond.notify_all()
        except (OSError, ValueError):
            with self.cond:
                self.closed = True
                self.cond.notify_all()


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> bytes:
    size = _HEADER.unpack(_exactly(sock, _HEADER.size))[0]
    if size > _MAX_FRAME:
        raise ValueError("frame too large")
    return _exactly(sock, size)


def _exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _function(channel: _Channel, name: str, params: list[str], doc: str) -> Callable[..., str]:
    def call(*args: Any, **kwargs: Any) -> str:
        if len(args) > len(params):
            raise TypeError(f"{name}() takes at most {len(params)} positional arguments")
        given = dict(zip(params, args, strict=False))
        twice = given.keys() & kwargs.keys()
        if twice:
            raise TypeError(f"{name}() got multiple values for {', '.join(sorted(twice))}")
        return channel.call(name, {**given, **kwargs})

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return call


def _main(fd: int) -> None:
    """The script's interpreter starts here: take the socket (descriptor `fd`), learn the tools
    and the script, run it as ``__main__``."""
    sock = socket.socket(fileno=fd)
    hello = json.loads(_recv(sock))
    channel = _Channel(sock)
    module = sys.modules[__name__]
    for name, spec in hello["tools"].items():
        setattr(module, name, _function(channel, name, spec["params"], spec["doc"]))
        __all__.append(name)
    code: str = hello["code"]
    linecache.cache["<script>"] = (len(code), None, code.splitlines(True), "<script>")
    sys.argv = ["<script>"]
    sys.path.append("")  # the workspace's own modules, after the standard library
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # what it printed survives a kill
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(code, "<script>", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:  # the script's traceback, without this module's frames
        shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        frames = [f for f in shown.stack if f.filename != __file__]
        shown.stack = traceback.StackSummary.from_list(frames)
        sys.stderr.write("".join(shown.format()))
        sys.exit(1)
