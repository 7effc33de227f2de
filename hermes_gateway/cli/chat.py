"""`hermes chat`: a thin terminal client to the running gateway's local chat API.

State lives in the gateway, so the client can drop and reconnect without losing the
conversation: a message is sent with an idempotency key and, after a reconnect, its answer is
picked up from the session history. Ctrl-C during a reply sends `/stop`, and so does typing
`/stop` (any `/command` typed during a reply is sent at once, while the reply keeps printing);
Ctrl-D quits (during a reply: once it is done). Tool activity shows as a dim `[tool: name]`
line, and a call that failed as `[tool: name failed]`. What the gateway says in the session
unasked (a scheduled job's answer) shows when it comes, from the session's feed.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
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
        self,
        base_url: str,
        token: str | None,
        session: str,
        *,
        stream: bool,
        out: TextIO,
        downloads: Path | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.headers = headers
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=None)
        self.base_url = base_url
        self.session = session
        self.stream = stream
        self.out = out
        # where the files an answer sends (`send_file`) are saved
        self.downloads = downloads if downloads is not None else Path.cwd() / "hermes-files"
        # where a streamed reply stands: whether its current text block has its `hermes> `
        # and whether the last thing written ended a line
        self._prompted = False
        self._line_open = False
        # a command typed during a reply is answered from another thread on a connection of
        # its own, while the reply goes on printing: the lock keeps their writes whole
        self._commands = httpx.Client(base_url=base_url, headers=headers, timeout=30)
        self._write_lock = threading.Lock()

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
            if response.status_code == 200:
                self._save_files((response.json().get("hermes") or {}).get("files"))
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
                with self._write_lock:
                    self._write_chunk(line)
            with self._write_lock:
                self._end_line()
            return 200

    def command_now(self, text: str) -> None:
        """A command typed while a reply prints: sent at once, its answer shown among the
        reply's lines (the terminal has already echoed what was typed)."""
        body = {
            "model": "hermes",
            "user": self.session,
            "messages": [{"role": "user", "content": text}],
        }
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        try:
            response = self._commands.post("/v1/chat/completions", json=body, headers=headers)
            answer = _text_of(response)
        except httpx.HTTPError as exc:
            answer = f"[{text} not sent: {exc}]"
        with self._write_lock:
            self._end_line()
            self.out.write(f"hermes> {answer}\n")
            self.out.flush()
            self._prompted = False

    def unasked(self, text: str) -> None:
        """Something the gateway said in the session unasked, shown on a line of its own
        (between a reply's lines if one is printing)."""
        with self._write_lock:
            self._end_line()
            self.out.write(f"hermes> {text}\n")
            self.out.flush()
            self._prompted = False

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
        if extra.get("files"):
            self._end_line()
            self._save_files(extra["files"])
        self.out.flush()

    def _save_files(self, files: object) -> None:
        """Fetch each file the answer sent and save it under `downloads`, saying where: a
        name is never a path, and a file already there is not overwritten."""
        if not isinstance(files, list):
            return
        for item in files:
            name = Path(str(item.get("name") or "file")).name or "file"
            try:
                got = self.http.get(str(item["url"]), params={"user": self.session}, timeout=60)
                got.raise_for_status()
            except (httpx.HTTPError, KeyError) as exc:
                self.out.write(f"[file {name} could not be fetched: {exc}]\n")
                continue
            self.downloads.mkdir(parents=True, exist_ok=True)
            target, n = self.downloads / name, 1
            while target.exists():
                target, n = self.downloads / f"{Path(name).stem}-{n}{Path(name).suffix}", n + 1
            target.write_bytes(got.content)
            self.out.write(f"[file saved: {target}]\n")

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


class SessionFeed:
    """Listens to the session's feed (`GET /v1/events`) on a thread of its own and writes
    what comes as `hermes> ...` lines; reconnects after the gateway restarts."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        session: str,
        write: Callable[[str], None],
        retry_s: tuple[float, ...] = (1, 2, 4, 8, 15),
    ) -> None:
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=None)
        self.session = session
        self.write = write
        self.retry_s = retry_s
        self.listening = threading.Event()  # connected now
        self._stop = threading.Event()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="session-feed")

    def start(self) -> SessionFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            response.close()  # unblocks the read on the feed's thread
        self.http.close()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._listen()
                failures = 0  # it ended (the gateway stopping): listen again at once
            except (httpx.HTTPError, RuntimeError, ValueError):
                failures += 1
            self.listening.clear()
            pause = self.retry_s[min(failures, len(self.retry_s) - 1)] if failures else 0.2
            self._stop.wait(pause)

    def _listen(self) -> None:
        with self.http.stream("GET", "/v1/events", params={"user": self.session}) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            self._response = response
            self.listening.set()
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("data: "):
                    item = json.loads(line[6:])
                    if item.get("type") == "message" and item.get("content"):
                        self.write(str(item["content"]))


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
    feed = SessionFeed(base_url, client.headers, session, client.unasked).start()
    try:
        return _chat_loop(client, read, out)
    finally:
        feed.stop()


def _chat_loop(client: ChatClient, read: Callable[[str], str], out: TextIO) -> int:
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
        watcher = _TypedDuringReply(client.command_now)
        try:
            client.send(line)
        except KeyboardInterrupt:
            out.write("\n[stopping]\n")
            client.send("/stop")
        finally:
            watcher.stop()
        typed.extend(watcher.lines)
        if watcher.quit:
            out.write("\n")
            return 0


class _TypedDuringReply:
    """Reads what is typed while a reply prints, on a thread of its own: a `/command` is sent
    at once (so `/stop` stops the run now, not after it), other lines are kept to send next,
    and Ctrl-D on an empty line asks to quit once the reply is done.

    The terminal stays in line mode during a reply, so a read returns complete lines; a line
    still being typed when the reply ends stays in the terminal for the next prompt. Only a
    terminal is read: piped input is the next messages, in order.
    """

    def __init__(self, on_command: Callable[[str], None]) -> None:
        self.lines: list[str] = []
        self.quit = False
        self._on_command = on_command
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if sys.stdin.isatty():
            self._thread = threading.Thread(
                target=self._read, args=(sys.stdin.fileno(),), daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop reading (before the prompt's own read takes the terminal back)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _read(self, fd: int) -> None:
        while not self.quit:
            # a short wait, so that stop() returns promptly once the reply is done
            if not select.select([fd], [], [], 0.05)[0]:
                if self._done.is_set():
                    return
                continue
            data = os.read(fd, 4096)
            if not data:
                self.quit = True
                return
            for line in data.decode(errors="replace").splitlines():
                if line.strip().startswith("/") and not self._done.is_set():
                    self._on_command(line.strip())
                elif line.strip():
                    self.lines.append(line)


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
