"""`hermes chat`: a thin terminal client to the running gateway's local chat API.

State lives in the gateway, so quitting and reconnecting with the same `--session` continues
the conversation. Ctrl-C during a reply sends `/stop`; Ctrl-D quits.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from typing import TextIO

import httpx


def run_chat(
    base_url: str,
    token: str | None,
    session: str,
    *,
    stream: bool = True,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=None) as client:
        try:
            client.get("/healthz", timeout=5).raise_for_status()
        except httpx.HTTPError:
            print(
                f"The gateway is not answering at {base_url}. Start it with `hermes gateway run`.",
                file=sys.stderr,
            )
            return 1
        out.write(
            f"Connected to {base_url} (session {session}). /help for commands, Ctrl-D quits.\n"
        )
        while True:
            try:
                line = read("you> ")
            except EOFError:
                out.write("\n")
                return 0
            except KeyboardInterrupt:
                out.write("\n")
                continue
            if not line.strip():
                continue
            try:
                _turn(client, session, line, stream, out)
            except KeyboardInterrupt:
                out.write("\n[stopping]\n")
                _turn(client, session, "/stop", False, out)
            except httpx.HTTPError as exc:
                out.write(f"[connection error: {exc}]\n")


def _turn(client: httpx.Client, session: str, text: str, stream: bool, out: TextIO) -> None:
    body = {
        "model": "hermes",
        "user": session,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    if not stream:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        out.write(f"hermes> {_text_of(response)}\n")
        return
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            out.write(f"hermes> {_text_of(response)}\n")
            return
        out.write("hermes> ")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", ()):
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    out.write(piece)
                    out.flush()
        out.write("\n")


def _text_of(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return f"[HTTP {response.status_code}]"
    if "error" in data:
        return f"[error: {data['error'].get('message')}]"
    return str(data["choices"][0]["message"]["content"])
