"""Attachments fetched on demand through the daemon's ``getAttachment`` (the file's bytes in
base64), never at intake and never from signal-cli's data directory (the daemon may run on
another host or as another user): size-bounded as announced and as it arrives, written off
the loop into ``<home>/media`` under a safe name."""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import re
import secrets
from pathlib import Path

from adapters.signal.rpc import Daemon
from hermes_gateway.platforms import Attachment, PermanentAdapterError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(file_id: str, name: str) -> str:
    """``<file id>-<name>``, unsafe runs as ``_``: it stays inside its folder."""
    fid = _UNSAFE.sub("_", file_id).lstrip("._")[:40]
    base = _UNSAFE.sub("_", name).lstrip(".")[-100:].lstrip(".") or "file"
    return f"{fid}-{base}" if fid else base


async def fetch(daemon: Daemon, attachment: Attachment, folder: Path, cap: int) -> Path:
    """The attachment's file under ``folder``; `PermanentAdapterError` past ``cap`` bytes."""
    label = attachment.name or attachment.file_id or "the file"
    if attachment.size > cap:
        raise PermanentAdapterError(f"{label} is {attachment.size} bytes (the cap is {cap})")
    final = folder / safe_name(attachment.file_id, attachment.name)
    if await asyncio.to_thread(final.is_file):
        return final
    result = await daemon.call("getAttachment", {"id": attachment.file_id})
    encoded = result.get("data") if isinstance(result, dict) else None
    if not isinstance(encoded, str):
        raise PermanentAdapterError(f"signal-cli getAttachment: no data for {label}")
    if len(encoded) * 3 // 4 > cap + 3:  # judged before decoding: the answer may lie
        raise PermanentAdapterError(f"{label} is over the cap of {cap} bytes")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise PermanentAdapterError(f"signal-cli getAttachment: {label} is not base64") from None
    if len(data) > cap:
        raise PermanentAdapterError(f"{label} is {len(data)} bytes (the cap is {cap})")
    try:
        await asyncio.to_thread(_write, final, data)
    except OSError as exc:
        raise PermanentAdapterError(f"could not write the file: {exc}") from exc
    return final


def _write(final: Path, data: bytes) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(f".{final.name}.{secrets.token_hex(4)}.part")
    part.write_bytes(data)
    os.replace(part, final)
