"""WhatsApp through Meta's Cloud API: webhooks on the control port, replies through the Graph
API. `SPEC` is what the gateway knows of it; importing this package imports none of it."""

from adapters.whatsapp.settings import TEXT_LIMIT, WhatsAppConfig, required_keys
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="whatsapp",
    section=WhatsAppConfig,
    adapter="adapters.whatsapp.adapter:WhatsAppAdapter",
    secrets={
        "access_token": "WHATSAPP_ACCESS_TOKEN",
        "app_secret": "WHATSAPP_APP_SECRET",
        "verify_token": "WHATSAPP_VERIFY_TOKEN",
    },
    required=required_keys,
    probe="adapters.whatsapp.probe:probe",
    # no edits (no live preview), no threads; reactions exist but the gateway sends none
    capabilities=Capabilities(can_edit=False, can_react=False, has_threads=False),
    limits=Limits(message_chars=TEXT_LIMIT),
    # Meta's user and system-user access tokens start with EAA
    token_patterns=(r"\bEAA[A-Za-z0-9]{20,}",),
    order=4,
)
