"""The local API's ``platforms.api:`` section: on or off, and its busy policy. It has no access
rules (it is not a `PlatformSection`): its routes sit behind the control server's token."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ApiPlatformConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # An OpenAI client expects each request to get its own answer, so overlapping requests for
    # one `user` wait their turn instead of interrupting (and merging into) the running one.
    # `runner` follows `runner.busy_policy` like the chat platforms.
    busy_policy: Literal["runner", "interrupt", "queue", "latest", "collect", "steer"] = "queue"
