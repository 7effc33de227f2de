"""The toy tool's spec: a name, a settings section of its own (with a secret) and the host
service it uses, all named here and nowhere in the gateway. Importing this imports no tool
code."""

from pydantic import BaseModel, ConfigDict, Field

from tools.spec import ToolSpec


class ToyEchoConfig(BaseModel):
    """``tools.toy_echo:`` in the gateway's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str = "toy"
    times: int = Field(1, ge=1, le=3)  # how often the text is echoed
    token: str = ""  # a secret: the log redactor hides it


SPEC = ToolSpec(
    name="toy_echo",
    factory="hermes_toy_tool.tool:make_toy_echo",
    section="toy_echo",
    settings=ToyEchoConfig,
    secrets=("token",),
    needs=frozenset({"history"}),
)
