"""Slack: a slack-bolt app fed by Socket Mode or the Events API.

`SPEC` is what the gateway knows of it; importing this package does not import the SDK."""

from adapters.slack.settings import SlackConfig, required_tokens
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="slack",
    section=SlackConfig,
    adapter="adapters.slack.adapter:SlackAdapter",
    secrets={
        "bot_token": "SLACK_BOT_TOKEN",
        "app_token": "SLACK_APP_TOKEN",
        "signing_secret": "SLACK_SIGNING_SECRET",
    },
    required=required_tokens,
    probe="adapters.slack.probe:probe",
    capabilities=Capabilities(can_edit=True, can_react=True, has_threads=True),
    # the default of platforms.slack.message_limit; Slack takes files up to 1 GB
    limits=Limits(message_chars=3900, upload_bytes=1024 * 1024 * 1024),
    # bot and user tokens; app-level tokens (Socket Mode)
    token_patterns=(r"\bxox[abprs]-[A-Za-z0-9-]{8,}", r"\bxapp-[A-Za-z0-9-]{8,}"),
    order=3,
)
