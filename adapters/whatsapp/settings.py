"""WhatsApp's ``platforms.whatsapp:`` config section (pure data: nothing of the adapter)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection

TEXT_LIMIT = 4096  # the Cloud API's longest text message body


class TemplateConfig(BaseModel):
    """An approved message template (no parameters), sent in place of a reply when the
    24-hour customer-service window is closed, so the user knows to write again."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = ""  # empty: no template; the reply is logged as not delivered
    language: str = "en_US"


class WhatsAppConfig(PlatformSection):
    access_token: str = ""  # a system user's permanent token (whatsapp_business_messaging)
    app_secret: str = ""  # signs every webhook delivery (X-Hub-Signature-256)
    verify_token: str = ""  # the string Meta echoes in the webhook's hub.challenge check
    phone_number_id: str = ""  # the business number the gateway sends from
    api_base: str = "https://graph.facebook.com/"
    api_version: str = "v21.0"
    webhook_path: str = "/whatsapp/webhook"
    message_limit: int = Field(TEXT_LIMIT, ge=100, le=TEXT_LIMIT)
    read_receipts: bool = True  # mark each message read (blue ticks) when its run begins
    # the hosts a media URL from GET /{media-id} may point at (besides api_base's)
    media_hosts: tuple[str, ...] = ("https://lookaside.fbsbx.com",)
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)
    template: TemplateConfig = TemplateConfig()
    # after a crash mid-send: how long to wait for the status webhook that proves a part went
    # out (Meta redelivers the one the dead process missed) before sending it again
    doubt_wait_s: float = Field(20.0, ge=0, le=600)
    # the gateway keeps the statuses' keys this long (a part in doubt is looked up there)
    status_keep_s: float = Field(7 * 24 * 3600.0, gt=0)


def required_keys(section: WhatsAppConfig) -> tuple[str, ...]:
    return ("access_token", "app_secret", "verify_token", "phone_number_id")
