"""`send_file`: the model hands the user a file of its workspace (a CSV it wrote, a chart, a
screenshot). The file goes with the answer, after its text, as the platform's own upload; the
path is checked here (inside the workspace, no link out, a regular file) and the size by the
gateway against the platform's limit."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.paths import open_regular, resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings


class SendFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="The file, relative to the workspace root, e.g. 'out/chart.png'.",
        min_length=1,
    )
    caption: str = Field("", max_length=1000, description="A short caption shown with it.")


class SendFileTool(ModelTool):
    name = "send_file"
    description = (
        "Send a file from the workspace to the user in this chat, with your answer (after its "
        "text): images are shown as images, other files as documents. Write the file first. "
        "The file is read when the answer goes out, so do not change it after calling this."
    )
    parallel_safe = False  # the files keep the order the model sent them in
    Args = SendFileArgs

    def call(self, args: SendFileArgs, ctx: ToolContext) -> str:
        send = ctx.host.send_file
        if send is None or not ctx.session_key:
            raise ToolError("files cannot be sent from here")
        shown = args.path.strip()
        path = resolve_in_workspace(ctx.workspace, args.path)
        # the descriptor proves a regular file (no FIFO, device or socket) at this moment
        os.close(open_regular(path, os.O_RDONLY, shown))
        return send(ctx.session_key, path, args.caption.strip())


def make_send_file(settings: ToolSettings) -> SendFileTool:
    return SendFileTool()
