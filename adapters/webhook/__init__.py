"""Webhooks: named routes on the control port for integrations (CI alerts, monitoring, forms,
a repository's events), each with its own secret, template and destination.

`SPEC` is what the gateway knows of it; importing this package imports none of the adapter."""

from adapters.webhook.settings import WebhookConfig, problems, route_secrets
from hermes_gateway.platforms import Capabilities, PlatformSpec

SPEC = PlatformSpec(
    name="webhook",
    section=WebhookConfig,
    adapter="adapters.webhook.adapter:WebhookAdapter",
    problems=problems,
    secret_values=route_secrets,
    probe="adapters.webhook.probe:probe",
    # a webhook cannot be written to unasked, nor asked a question back
    capabilities=Capabilities(can_ask_approval=False, can_push=False),
    order=10,
)
