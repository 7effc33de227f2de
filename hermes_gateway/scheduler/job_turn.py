"""What a claimed run of a job becomes for the runner: a turn of the job's own session with its
prompt prefaced (`turn_of`), and its answer on the way to the job's target (`answer_of`). The
runner runs and settles it like a message (`hermes_gateway.core.job_turns.JobTurns`)."""

from __future__ import annotations

import time

from hermes_gateway.core.job_turns import SILENT, JobAnswer, JobTurn
from hermes_gateway.events import Chat, OutboundFile, OutboundKind, build_session_key
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.scheduler.jobs import Job, target

PREFACE = (
    "[Scheduled job {name!r} ({id}), for {when}. Your answer is delivered to the chat the job "
    "belongs to; answer exactly {silent} if there is nothing worth telling.]\n\n"
)


def turn_of(job: Job, run_id: int, slot: int, timeout_s: float) -> JobTurn:
    """The turn of ``job``'s session that runs its claimed ``slot``."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(slot))
    text = PREFACE.format(name=job.name, id=job.id, when=when, silent=SILENT) + job.prompt
    return JobTurn(job.session_key, text, run_id, slot, timeout_s, delivered_to(job))


def delivered_to(job: Job) -> str | None:
    """The platform ``job``'s answer is delivered to (files sent with it are checked against
    its limits), or None when it goes to no chat: `none`, or a platform nothing can be sent
    to unasked (`JobSettle.deliver` skips it alike)."""
    platform = target(job.deliver, job.origin).platform
    if platform is None:
        return None
    caps = capabilities(platform)
    return platform if caps.can_push or caps.keeps_unasked else None


def answer_of(
    job: Job,
    run_id: int,
    text: str,
    kind: OutboundKind,
    *,
    per_user: bool,
    parts_sent: int = 0,
    doubt: str | None = None,
    files: tuple[OutboundFile, ...] = (),
) -> JobAnswer:
    """A run's answer to the job's target, its ``files`` after its text. Delivered to
    `origin`, it joins that chat's session (named as the runner names it: ``per_user``,
    `runner.group_sessions_per_user`)."""
    where = target(job.deliver, job.origin)
    chat = None
    if where.platform is not None:
        chat = Chat(where.platform, where.chat_id, where.thread_id, job.session_key)
    joins = None
    if job.deliver == "origin":
        o = job.origin
        joins = build_session_key(
            o.platform, o.chat_type, o.chat_id, o.thread_id, o.user_id, per_user=per_user
        )
    return JobAnswer(run_id, text, chat, kind, joins, parts_sent, doubt, files)
