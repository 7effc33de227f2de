"""`hermes chat`: a thin terminal client to the running gateway's local chat API.

State lives in the gateway, so the client can drop and reconnect without losing the
conversation: a message is sent with an idempotency key and, after a reconnect, its answer is
picked up from the session history. Ctrl-C during a reply sends `/stop`; Ctrl-D quits (during
a reply: once it is done). Tool activity shows as a dim `[tool: name]` line, and a call that
failed as `[tool: name failed]`.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import httpx

RETRY_DELAYS = (0.5, 1, 2, 4, 8)


class _Restarting(Exception):
    """The gateway is stopping (503 `shutting_down`): the message waits in its inbox, and the
    answer is picked up once it is back, as after a dropped connection."""


class ChatClient:
    def __init__(
        self, base_url: str, token: str | None, session: str, *, stream: bool, out: TextIO
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=None)
        self.base_url = base_url
        self.session = session
        self.stream = stream
        self.out = out
        # where a streamed reply stands: whether its current text block has its `hermes> `
        # and whether the last thing written ended a line
        self._prompted = False
        self._line_open = False

    def healthy(self) -> bool:
        try:
            return self.http.get("/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def send(self, text: str) -> None:
        """One turn; survives the gateway restarting underneath it."""
        key = uuid.uuid4().hex
        seen = len(self._history())
        for delay in (0, *RETRY_DELAYS):
            if delay:
                self.out.write(f"[gateway unreachable; retrying in {delay}s]\n")
                time.sleep(delay)
                if not self.healthy():
                    continue
            try:
                status = self._turn(text, key)
            except (httpx.TransportError, _Restarting):
                continue
            if status == 409:  # it got there before the connection dropped
                self._await_answer(seen)
            return
        self.out.write("[the gateway did not come back; your message is kept if it got there]\n")

    def _turn(self, text: str, key: str) -> int:
        body = {
            "model": "hermes",
            "user": self.session,
            "stream": self.stream,
            "messages": [{"role": "user", "content": text}],
        }
        headers = {"Idempotency-Key": key}
        if not self.stream:
            response = self.http.post("/v1/chat/completions", json=body, headers=headers)
            _check_restarting(response)
            if response.status_code != 409:
                self.out.write(f"hermes> {_text_of(response)}\n")
            return response.status_code
        with self.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                r.read()
                _check_restarting(r)
                if r.status_code != 409:
                    self.out.write(f"hermes> {_text_of(r)}\n")
                return r.status_code
            self._prompted = self._line_open = False
            for line in r.iter_lines():
                self._write_chunk(line)
            self._end_line()
            return 200

    def _write_chunk(self, line: str) -> None:
        if not line.startswith("data: ") or line == "data: [DONE]":
            return
        data = json.loads(line[6:])
        if isinstance(data.get("error"), dict):  # the stream ended in an error
            if data["error"].get("code") == "shutting_down":
                self._end_line()
                self.out.write("[the gateway is restarting]\n")
                raise _Restarting
            self._end_line()
            self._write_text(f"[error: {data['error'].get('message')}]")
        extra = data.get("hermes") or {}
        if extra.get("tool"):
            self._write_tool_note(str(extra["tool"]), extra.get("phase"), extra.get("ok"))
        if extra.get("kind") == "interrupted":
            self._write_text(self._dim(" [interrupted]" if self._line_open else "[interrupted]"))
        for choice in data.get("choices", ()):
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                self._write_text(piece)
        self.out.flush()

    def _write_tool_note(self, tool: str, phase: object, ok: object) -> None:
        """A call shows when it starts; one that failed shows again when it ends, so a failure
        is not mistaken for a result. Each note has its own line, and the reply's text after
        it gets a new `hermes> `."""
        if phase == "start":
            note = f"[tool: {tool}]"
        elif phase == "end" and ok is False:
            note = f"[tool: {tool} failed]"
        else:
            return
        self._end_line()
        self.out.write(self._dim(note) + "\n")
        self._prompted = False

    def _write_text(self, text: str) -> None:
        if not self._prompted:
            self.out.write("hermes> ")
            self._prompted = True
        self.out.write(text)
        self._line_open = not text.endswith("\n")

    def _end_line(self) -> None:
        if self._line_open:
            self.out.write("\n")
            self._line_open = False

    def _dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.out.isatty() else text

    def _history(self) -> list[dict[str, Any]]:
        try:
            r = self.http.get("/v1/history", params={"user": self.session}, timeout=10)
            return list(r.json().get("messages", [])) if r.status_code == 200 else []
        except httpx.HTTPError:
            return []

    def _await_answer(self, seen: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            new = self._history()[seen:]
            answers = [m for m in new if m.get("role") == "assistant" and m.get("content")]
            if answers:
                self.out.write(f"hermes> {answers[-1]['content']}\n")
                return
            time.sleep(0.5)


def run_chat(
    base_url: str,
    token: str | None,
    session: str,
    *,
    stream: bool = True,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
    history_file: Path | None = None,
) -> int:
    client = ChatClient(base_url, token, session, stream=stream, out=out)
    if not client.healthy():
        print(
            f"The gateway is not answering at {base_url}. Start it with `hermes gateway run`.",
            file=sys.stderr,
        )
        return 1
    _enable_line_editing(history_file)
    out.write(f"Connected to {base_url} (session {session}). /help for commands, Ctrl-D quits.\n")
    typed: list[str] = []  # lines entered while a reply was printing, sent next
    while True:
        try:
            line = typed.pop(0) if typed else read("you> ")
        except EOFError:
            out.write("\n")
            return 0
        except KeyboardInterrupt:
            out.write("\n")
            continue
        if not line.strip():
            continue
        try:
            client.send(line)
        except KeyboardInterrupt:
            out.write("\n[stopping]\n")
            client.send("/stop")
        quit_now, lines = _typed_during_reply()
        typed.extend(lines)
        if quit_now:
            out.write("\n")
            return 0


def _typed_during_reply() -> tuple[bool, list[str]]:
    """Whether Ctrl-D was pressed while a reply printed, and the lines entered meanwhile.

    The terminal stays in line mode during a reply, so what was typed waits in it: a complete
    line is readable, and Ctrl-D on an empty line is a read of zero bytes.
    """
    if not sys.stdin.isatty():
        return False, []
    fd = sys.stdin.fileno()
    lines: list[str] = []
    while select.select([fd], [], [], 0)[0]:
        data = os.read(fd, 4096)
        if not data:
            return True, lines
        lines.extend(data.decode(errors="replace").splitlines())
    return False, lines


def _enable_line_editing(history_file: Path | None) -> None:
    """Arrow keys and input history on a terminal (readline), kept across runs."""
    if not sys.stdin.isatty():
        return
    try:
        import atexit
        import readline
    except ImportError:
        return
    if history_file is not None:
        try:
            readline.read_history_file(history_file)
        except OSError:
            pass
        readline.set_history_length(1000)
        atexit.register(readline.write_history_file, history_file)


def _check_restarting(response: httpx.Response) -> None:
    if response.status_code == 503 and _error_code(response) == "shutting_down":
        raise _Restarting


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _text_of(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return f"[HTTP {response.status_code}]"
    if "error" in data:
        return f"[error: {data['error'].get('message')}]"
    if (data.get("hermes") or {}).get("kind") == "interrupted":
        return "[interrupted]"
    return str(data["choices"][0]["message"]["content"])
