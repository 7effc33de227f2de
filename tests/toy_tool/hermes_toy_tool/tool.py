"""The toy tool itself: echoes its text as its settings say, and names the host services its
calls can see (only those its spec needs)."""

from dataclasses import fields

from pydantic import BaseModel, ConfigDict, Field

from hermes_toy_tool import ToyEchoConfig
from tools.catalog import ToolSettings
from tools.registry import ModelTool, ToolContext


class ToyEchoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What to echo back.")


class ToyEchoTool(ModelTool):
    name = "toy_echo"
    description = "Echo a text back with the configured prefix, for the gateway's plugin tests."
    Args = ToyEchoArgs

    def __init__(self, settings: ToyEchoConfig) -> None:
        self.settings = settings

    def call(self, args: ToyEchoArgs, ctx: ToolContext) -> str:
        seen = [f.name for f in fields(ctx.host) if getattr(ctx.host, f.name) is not None]
        echo = " ".join([args.text] * self.settings.times)
        return f"{self.settings.prefix}: {echo} (host: {', '.join(seen) or 'nothing'})"


def make_toy_echo(settings: ToolSettings) -> ToyEchoTool:
    return ToyEchoTool(settings.section("toy_echo", ToyEchoConfig))
