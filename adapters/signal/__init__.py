"""Signal: the account's messages through a signal-cli daemon's JSON-RPC over HTTP.

`SPEC` is what the gateway knows of it; importing this package imports none of the adapter."""

from adapters.signal.settings import MESSAGE_CHARS, SignalConfig, problems
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="signal",
    section=SignalConfig,
    adapter="adapters.signal.adapter:SignalAdapter",
    problems=problems,
    probe="adapters.signal.probe:probe",
    # edits exist (editTimestamp) but the live preview is not used: see docs/platforms.md
    capabilities=Capabilities(can_edit=False, can_react=True, can_ask_approval=True),
    # a file the agent sends goes as an attachment; Signal takes up to 100 MB
    limits=Limits(message_chars=MESSAGE_CHARS, upload_bytes=100 * 1024 * 1024),
    order=4,
)
