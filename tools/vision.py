"""`vision_analyze`: send an image (a workspace file or one attached to the user's message) to
the configured vision model as a data URL and return what it says."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.errors import ToolError
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class VisionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(
        "Describe this image in detail.",
        description="What to find out about the image, e.g. 'What error does this screenshot "
        "show?'.",
        min_length=1,
        max_length=4000,
    )
    path: str | None = Field(
        None, description="Image file relative to the workspace root (png, jpeg, gif, webp)."
    )
    attachment: int | None = Field(
        None,
        ge=1,
        description="Use the n-th image attached to the user's current message (1 = first) "
        "instead of a file.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> VisionArgs:
        if (self.path is None) == (self.attachment is None):
            raise ValueError("give exactly one of 'path' or 'attachment'")
        return self


class VisionTool(ModelTool):
    name = "vision_analyze"
    description = (
        "Look at an image and answer a question about it: a workspace image file ('path') or "
        "an image the user attached to their message ('attachment': 1 for the first)."
    )
    parallel_safe = True
    Args = VisionArgs

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def call(self, args: VisionArgs, ctx: ToolContext) -> str:
        describe = ctx.host.describe_image
        if describe is None:
            raise ToolError("no vision model is available here")
        if args.path is not None:
            path = resolve_in_workspace(ctx.workspace, args.path)
            shown = args.path.strip()
        else:
            assert args.attachment is not None
            fetch = ctx.host.fetch_attachment
            if fetch is None:
                raise ToolError("attachments cannot be fetched on this platform")
            path = fetch(ctx.session_key, args.attachment)
            shown = f"attachment {args.attachment}"
        data_url = image_data_url(path, shown, self.max_bytes)
        answer = describe(args.question, data_url, ctx.should_stop)
        return answer.strip() or "(the vision model returned an empty answer)"


def image_data_url(path: Path, shown: str, max_bytes: int) -> str:
    if not path.is_file():
        raise ToolError(f"{shown!r} does not exist or is not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ToolError(f"{shown!r} is {size} bytes; images up to {max_bytes} bytes are sent")
    data = path.read_bytes()
    mime = sniff_image(data)
    if mime is None:
        raise ToolError(f"{shown!r} is not a PNG, JPEG, GIF or WebP image")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def sniff_image(data: bytes) -> str | None:
    for signature, mime in _SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def make_vision(settings: ToolSettings) -> VisionTool:
    return VisionTool(settings.vision_max_bytes)
