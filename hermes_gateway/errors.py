"""The gateway's exception hierarchy; SDK exceptions are translated into these at the edges.

    HermesError
    ├── ConfigError            bad config: the CLI exits 78 (systemd must not restart)
    ├── AdapterError           a platform call failed
    │   ├── AdapterAuthError       the platform rejected our credentials (exit 78 at start)
    │   ├── RateLimitedError       the platform asked us to wait `retry_after` seconds
    │   ├── TransientAdapterError  5xx, resets, timeouts: retried with bounded backoff
    │   │   └── PartialDeliveryError   a reply failed after `parts_sent` of its parts went out
    │   └── PermanentAdapterError  blocked bot, chat not found, bad request: logged once
    ├── StoreError             the database failed (locked, read-only, full, unreachable)
    ├── FencedOut              a session write under a lease another instance has since taken
    ├── CoordinationUnavailable  the cluster's coordination store (Redis) cannot be reached
    ├── PeerUnreachable        another instance of the cluster does not answer over HTTP
    ├── PoolFull               a user or chat already has as many runs waiting as allowed
    ├── RequestError           a control-API request is invalid (carries an HTTP status)
    └── JobRequestError        a scheduled-job request that cannot be done (text says why)

`agent_core` and `tools` sit below this package and never raise out of their public API:
`AIAgent.run_conversation` returns a failed `RunResult` and a failing tool becomes an error
observation, so neither needs to import from here.
"""

from __future__ import annotations


class HermesError(Exception):
    """Root of every error the gateway raises on purpose."""


class ConfigError(HermesError):
    """Invalid configuration; `key` names the offending key path (``runner.busy_policy``)."""

    def __init__(self, key: str, reason: str, *, others: tuple[str, ...] = ()) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)
        self.key = key
        self.reason = reason
        self.others = others  # further problems found in the same pass (`config check`)


class AdapterError(HermesError):
    """A platform call failed."""


class AdapterAuthError(AdapterError):
    """The platform rejected our token: a configuration problem, not a network one."""


class RateLimitedError(AdapterError):
    """The platform asked us to wait before the next call."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TransientAdapterError(AdapterError):
    """A failure worth retrying: 5xx, a reset connection, a timeout."""


class PartialDeliveryError(TransientAdapterError):
    """A reply split into several messages failed after its first `parts_sent` went out: the
    next attempt resumes after them instead of sending them again."""

    def __init__(self, message: str, parts_sent: int) -> None:
        super().__init__(message)
        self.parts_sent = parts_sent


class PermanentAdapterError(AdapterError):
    """A failure that retrying cannot fix: the bot is blocked, the chat is gone."""


class StoreError(HermesError):
    """The database failed; the message stays in the inbox if it got that far."""


class FencedOut(HermesError):
    """The store refused a write for a session: it carried the fencing token of a lease that
    another instance has since taken. Nothing of the write was stored."""


class CoordinationUnavailable(HermesError):
    """The coordination store cannot be reached: no lease can be taken or kept for now."""


class PeerUnreachable(HermesError):
    """Another instance of the cluster cannot be reached over HTTP (no address published,
    connection refused or cut, no answer in time, our signature refused); the text says which."""


class PoolFull(HermesError):
    """A run was not taken: its user's (``kind`` "user") or chat's ("chat") runs waiting
    for the agent pool are already at ``cap`` (`runner.max_waiting_per_user` / `_chat`)."""

    def __init__(self, kind: str, cap: int) -> None:
        super().__init__(f"{kind} has {cap} runs waiting already")
        self.kind = kind
        self.cap = cap


class RequestError(HermesError):
    """An invalid control-API request, answered with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class JobRequestError(HermesError):
    """A scheduled-job request that cannot be done; the text says why (shown to the model or
    the user). Here rather than in the scheduler so the tool host can catch it without
    importing the scheduler."""
