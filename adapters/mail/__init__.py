"""Email: IMAP (IDLE, polling as fallback) in, SMTP out; a mail thread is a session.

`SPEC` is what the gateway knows of it; importing this package imports neither IMAP nor SMTP
library (the package is `adapters.mail` so that it never shadows the standard `email`)."""

from adapters.mail.settings import EmailConfig, email_problems
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec


def _password(section: EmailConfig) -> tuple[str, ...]:
    return ("password",)


SPEC = PlatformSpec(
    name="email",
    section=EmailConfig,
    adapter="adapters.mail.adapter:EmailAdapter",
    secrets={"password": "EMAIL_PASSWORD"},
    required=_password,
    problems=email_problems,
    probe="adapters.mail.probe:probe",
    # a mail cannot be edited; a yes/no question by mail would wait hours: commands that need
    # approval are refused rather than asked
    capabilities=Capabilities(can_ask_approval=False, has_threads=True),
    limits=Limits(message_chars=50_000),
    order=4,
)
