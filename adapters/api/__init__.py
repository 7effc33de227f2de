"""The local API platform: an OpenAI-compatible chat-completions endpoint on the control port.

`SPEC` is what the gateway knows of it. It has no access rules of its own (its routes want
`control.token` when one is set; open on a loopback bind otherwise) and no channel for a
question back to the caller."""

from adapters.api.settings import ApiPlatformConfig
from hermes_gateway.platform_spec import Capabilities, PlatformSpec

SPEC = PlatformSpec(
    name="api",
    section=ApiPlatformConfig,
    adapter="adapters.api.adapter:ApiAdapter",
    capabilities=Capabilities(can_ask_approval=False, can_push=False),
    order=0,
)
