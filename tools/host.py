"""What the layers above lend the tools: plain synchronous callables and the records they pass.

Tools never import the gateway or the agent. The gateway fills a `ToolHost` (each callable hops
to its event loop and blocks this worker thread, never the loop); the agent fills
`ToolContext.delegate`. A missing callable means "not available here" and the tool says so;
a call sees only the callables its tool's spec needs (`HOST_NEEDS`, `narrowed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool asking the user of ``session_key`` to allow one action."""

    session_key: str
    tool: str
    action: str  # what would run, shown to the user verbatim
    reason: str  # why it needs approval, e.g. "recursive delete"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One past message found by `session_search`."""

    when: float  # the message's time (epoch seconds)
    role: str
    snippet: str
    current: bool  # from the conversation in progress (not an earlier one)


@dataclass(frozen=True, slots=True)
class DelegateRequest:
    """A sub-problem for a child agent: its task, its context and the tools it may use."""

    task: str
    context: str = ""
    tools: tuple[str, ...] | None = None  # None: the parent's tools (less delegate at the limit)


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory of the long-term archive, with where it came from."""

    id: int
    content: str
    context: str
    tags: tuple[str, ...]
    when: float  # epoch seconds
    session_key: str  # the conversation it was retained in ("" if none)
    message_id: str  # the message that was answered then ("" if none)


@dataclass(frozen=True, slots=True)
class Recalled:
    """What `recall` found, best first, and a note when the search was degraded."""

    memories: tuple[Memory, ...]
    note: str = ""  # e.g. "keyword search only: the embeddings endpoint did not answer"


@dataclass(frozen=True, slots=True)
class ForgetRequest:
    """`hindsight_forget`'s ask: memories by id, or a query (shown first; deleted only with
    ``confirm`` once the same query was shown in the same conversation)."""

    ids: tuple[int, ...] = ()
    query: str = ""
    confirm: bool = False
    limit: int = 10


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What `forget` did: the memories a query matched (nothing deleted), or the ids deleted
    and those asked for that the asking user's bank does not hold."""

    matched: tuple[Memory, ...] = ()
    forgotten: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class BrowserRequest:
    """One browser action of a session's page (`tools.browser`): ``action`` is one of navigate,
    snapshot, click, type, press, scroll, back, screenshot, close."""

    session_key: str
    action: str
    url: str = ""
    ref: str = ""  # an element's ref from the last snapshot, e.g. "e12"
    text: str = ""
    key: str = ""
    submit: bool = False
    direction: str = "down"


@dataclass(frozen=True, slots=True)
class BrowserResult:
    """What the page shows after the action, for the model; a screenshot's PNG bytes."""

    text: str
    image: bytes = b""


# ask(request, should_stop) -> approved?  False on deny, timeout, interrupt or no way to ask
AskApproval = Callable[[ApprovalRequest, Callable[[], bool]], bool]
# search(session_key, query, limit) -> hits, best first
SearchHistory = Callable[[str, str, int], list[SearchHit]]
# fetch(session_key, n) -> local path of the n-th (1-based) image attached to the current turn
FetchAttachment = Callable[[str, int], Path]
# describe(prompt, data_url, should_stop) -> the vision model's answer
DescribeImage = Callable[[str, str, Callable[[], bool]], str]
# manage(session_key, request) -> what was done, for the model (`cronjob`); raises ToolError
ManageJobs = Callable[[str, Mapping[str, Any]], str]
# user_of(session_key) -> "<platform>/<user id>" of the user the session's run answers, or None
UserOf = Callable[[str], str | None]
# retain(session_key, content, context, tags) -> what was stored, in words
Retain = Callable[[str, str, str, tuple[str, ...]], str]
# recall(session_key, query, limit) -> the asking user's memories that match, best first
Recall = Callable[[str, str, int], Recalled]
# reflect(session_key, query, should_stop) -> an answer from the memories, citing them
Reflect = Callable[[str, str, Callable[[], bool]], str]
# send(session_key, path, caption) -> what was queued, for the model: the regular file ``path``
# (resolved inside the workspace) goes with the run's answer; raises ToolError when it cannot
SendFile = Callable[[str, Path, str], str]
# forget(session_key, request) -> what matched or was deleted, in the asking user's bank only
Forget = Callable[[str, ForgetRequest], Forgotten]
# browse(request, should_stop) -> the page after the action; raises ToolError
Browse = Callable[[BrowserRequest, Callable[[], bool]], BrowserResult]


@dataclass(frozen=True, slots=True)
class ToolHost:
    """The gateway's services for tools; each is optional. A service is declared here once,
    by a field whose ``need`` is the key of `HOST_NEEDS` (and of `ToolSpec.needs`) that opens
    it; the gateway lends it by a method of the same name on one of its providers
    (`provided_by`), so adding one changes nothing else here or in the gateway's wiring."""

    ask_approval: AskApproval | None = field(default=None, metadata={"need": "approvals"})
    search_history: SearchHistory | None = field(default=None, metadata={"need": "history"})
    fetch_attachment: FetchAttachment | None = field(default=None, metadata={"need": "attachments"})
    describe_image: DescribeImage | None = field(default=None, metadata={"need": "vision"})
    manage_jobs: ManageJobs | None = field(default=None, metadata={"need": "jobs"})
    user_of: UserOf | None = field(default=None, metadata={"need": "memory"})
    retain: Retain | None = field(default=None, metadata={"need": "memory"})
    recall: Recall | None = field(default=None, metadata={"need": "memory"})
    reflect: Reflect | None = field(default=None, metadata={"need": "memory"})
    forget: Forget | None = field(default=None, metadata={"need": "memory"})
    browse: Browse | None = field(default=None, metadata={"need": "browser"})
    send_file: SendFile | None = field(default=None, metadata={"need": "send_files"})

    @classmethod
    def provided_by(cls, *providers: object) -> ToolHost:
        """Each service from the first of ``providers`` that has a callable of its name."""
        lent: dict[str, Any] = {}
        for one in fields(cls):
            found = (getattr(p, one.name, None) for p in providers)
            lent[one.name] = next((f for f in found if callable(f)), None)
        return cls(**lent)


# what a tool may use (`tools.spec.ToolSpec.needs`) -> the `ToolHost` fields it opens, as the
# fields declare it; "delegation" opens `ToolContext.delegate`, and "tools" (a tool that calls
# the session's other tools) keeps the whole host, since each call it makes is narrowed again
# to the called tool's own needs
HOST_NEEDS: dict[str, tuple[str, ...]] = {
    **{
        need: tuple(f.name for f in fields(ToolHost) if f.metadata["need"] == need)
        for need in dict.fromkeys(f.metadata["need"] for f in fields(ToolHost))
    },
    "delegation": (),
    "tools": (),
}
_ALL_SERVICES = tuple(f.name for f in fields(ToolHost))


def narrowed(host: ToolHost, needs: frozenset[str]) -> ToolHost:
    """``host`` with only the services ``needs`` opens (the others are "not available")."""
    if "tools" in needs:
        return host
    kept = {name for need in needs for name in HOST_NEEDS.get(need, ())}
    return replace(host, **{name: None for name in _ALL_SERVICES if name not in kept})
