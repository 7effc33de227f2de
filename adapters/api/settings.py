"""The local API's ``platforms.api:`` section: on or off. It has no access rules (it is not a
`PlatformSection`): its routes sit behind the control server's token."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ApiPlatformConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
