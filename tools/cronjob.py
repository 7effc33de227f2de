"""`cronjob`: the model schedules agent turns ("remind me in 20 minutes", "every weekday at
7:30 summarize my feeds") and manages this chat's jobs, through the gateway's scheduler.
`cronjob_manage` is the same tool under the reference's name, so prompts written for it work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

Action = Literal["create", "list", "update", "pause", "resume", "run", "remove", "runs"]


class CronjobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Action = Field(
        description="create a job; list this chat's jobs; update, pause, resume, run (now), "
        "remove a job, or show its recent runs (these need job_id)."
    )
    job_id: str | None = Field(None, max_length=16, description="The job, as list shows it.")
    prompt: str | None = Field(
        None,
        max_length=8000,
        description="create/update: the instruction the job runs, self-contained (it runs "
        "without this conversation), e.g. 'Remind the user to stretch.'",
    )
    schedule: str | None = Field(
        None,
        max_length=200,
        description="create/update: 'in 20m' (once), 'every 2h' (repeating), a 5-field cron "
        "expression such as '30 7 * * 1-5' (weekdays 07:30), or an ISO time "
        "'2027-03-01T09:00' (once).",
    )
    name: str | None = Field(None, max_length=200, description="A short name for the job.")
    timezone: str | None = Field(
        None,
        max_length=64,
        description="IANA zone of the schedule's wall-clock times, e.g. 'Europe/Berlin'; "
        "default: the gateway's.",
    )
    deliver: Literal["origin", "none"] | None = Field(
        None,
        description="Where answers go: 'origin' (this chat, the default) or 'none' (a job "
        "that only acts through tools).",
    )
    repeat: int | None = Field(None, ge=1, le=100_000, description="Run at most this many times.")


class CronjobTool(ModelTool):
    name = "cronjob"
    description = (
        "Schedule agent turns that run later on their own and deliver their answer to this "
        "chat, and manage this chat's scheduled jobs. Write the prompt so it stands alone. "
        "Tell the user when the job first runs (the result says). List jobs before removing "
        "one. A job's answer of exactly [SILENT] is not delivered."
    )
    parallel_safe = False
    Args = CronjobArgs

    def call(self, args: CronjobArgs, ctx: ToolContext) -> str:
        manage = ctx.host.manage_jobs
        if manage is None or not ctx.session_key:
            raise ToolError("scheduled jobs are not available here (scheduler.enabled is off)")
        if args.action not in ("create", "list") and not args.job_id:
            raise ToolError(f"{args.action} needs job_id (list shows the jobs)")
        if args.action == "create" and not (args.prompt and args.schedule):
            raise ToolError("create needs a prompt and a schedule")
        return manage(ctx.session_key, args.model_dump(exclude_none=True))


class CronjobManageTool(CronjobTool):
    name = "cronjob_manage"


def make_cronjob(settings: ToolSettings) -> CronjobTool:
    return CronjobTool()


def make_cronjob_manage(settings: ToolSettings) -> CronjobManageTool:
    return CronjobManageTool()
