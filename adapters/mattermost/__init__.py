"""Mattermost: the REST v4 API and the WebSocket event stream of a bot account, on aiohttp.

`SPEC` is what the gateway knows of it; importing this package imports none of the adapter."""

from adapters.mattermost.settings import POST_MAX_CHARS, MattermostConfig, required_keys
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="mattermost",
    section=MattermostConfig,
    adapter="adapters.mattermost.adapter:MattermostAdapter",
    secrets={"token": "MATTERMOST_TOKEN"},
    required=required_keys,
    probe="adapters.mattermost.probe:probe",
    capabilities=Capabilities(can_edit=True, has_threads=True),
    # the server's default MaxFileSize is 100 MB
    # the server's default MaxFileSize is 100 MB
    limits=Limits(message_chars=POST_MAX_CHARS, upload_bytes=100 * 1024 * 1024),
    # a personal access token is 26 lowercase letters and digits, shaped like every post and
    # user id, so no pattern of its own: the configured token is redacted as a secret, and the
    # generic shapes cover it after "Bearer " and as a "token" key (the WebSocket's challenge)
    token_patterns=(),
)
