"""Matrix: a bot user on any homeserver through mautrix's client API, /sync long polling with
its ``since`` token kept in the gateway's home.

`SPEC` is what the gateway knows of it; importing this package does not import mautrix."""

from adapters.matrix.settings import MatrixConfig
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="matrix",
    section=MatrixConfig,
    adapter="adapters.matrix.adapter:MatrixAdapter",
    secrets={"access_token": "MATRIX_ACCESS_TOKEN"},
    required=lambda section: ("homeserver", "access_token"),
    probe="adapters.matrix.probe:probe",
    capabilities=Capabilities(can_edit=True, has_threads=True),
    # an event is at most 64 KiB on the wire with both the plain and the HTML body in it
    limits=Limits(message_chars=8000, upload_bytes=50 * 1024 * 1024),
    # Synapse's access tokens (syt_<user>_<random>_<crc>), and the legacy macaroons
    token_patterns=(r"syt_[A-Za-z0-9_-]{20,}", r"MDAx[A-Za-z0-9_-]{40,}"),
)
