"""The local API platform: an OpenAI-compatible chat-completions endpoint on the control port.

`SPEC` is what the gateway knows of it. It has no access rules of its own (its routes want
`control.token` when one is set; open on a loopback bind otherwise) and no channel for a
question back to the caller. What the gateway says unasked (a scheduled job's answer) is kept
in the session's history and streamed to whoever listens (`GET /v1/events`)."""

from adapters.api.settings import ApiPlatformConfig
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

UPLOAD_BYTES = 100 * 1024 * 1024  # the largest file an answer hands its client (`send_file`)

SPEC = PlatformSpec(
    name="api",
    section=ApiPlatformConfig,
    adapter="adapters.api.adapter:ApiAdapter",
    capabilities=Capabilities(can_ask_approval=False, can_push=False, keeps_unasked=True),
    limits=Limits(upload_bytes=UPLOAD_BYTES),
    order=0,
)
