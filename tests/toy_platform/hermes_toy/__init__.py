"""The toy platform's spec: a config section, a secret with its environment default, the shape
of its tokens, an adapter and a doctor probe, all named here and nowhere in the gateway."""

from hermes_gateway.platforms import Capabilities, Limits, PlatformSection, PlatformSpec


class ToyConfig(PlatformSection):
    url: str = ""  # the toy wire's base URL
    token: str = ""


SPEC = PlatformSpec(
    name="toy",
    section=ToyConfig,
    adapter="hermes_toy.adapter:ToyAdapter",
    secrets={"token": "TOY_TOKEN"},
    required=lambda section: ("token", "url"),
    probe="hermes_toy.adapter:probe",
    capabilities=Capabilities(can_ask_approval=True),  # replies go back to the same chat
    limits=Limits(message_chars=1000),
    token_patterns=(r"\btoy-live-[a-z]{8}\b",),  # what its tokens look like, for the logs
)
