"""One long-lived OpenAI-compatible client per provider, with retries and interruptible streams.

Building a client (TLS context, connection pool) per request is what made the reference gateway
CPU-bound; here one `LLMClient` serves every agent and keeps its connections alive.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

if TYPE_CHECKING:
    import httpx
    import openai

import structlog

from agent_core import cutoff
from agent_core.backoff import Backoff
from agent_core.completion import (
    Accumulator,
    Completion,
    ModelError,
    ToolCall,
    from_body,
    status_error,
)
from agent_core.endpoint import EndpointState
from agent_core.history import encode

Message = dict[str, Any]
OnStop = Callable[[Callable[[], None]], Callable[[], None]]  # registers a hook, returns its remover
_BYTES_PER_TOKEN = 4
SHARD_CONNECTIONS = 2  # most connections in one pool (`shards`): its cost grows as the square
# how long an idle connection of a sized client stays open: past the gap between two bursts
# of conversations (httpx's 5 s closed a burst's connections before the next, which then
# opened hundreds at once, and one of them timed out); bounded by the pool's size
KEEPALIVE_S = 60.0

log = structlog.get_logger("hermes.llm")
__all__ = ["Completion", "LLMClient", "LLMSettings", "ModelError", "ToolCall"]


@dataclass(frozen=True, slots=True)
class LLMSettings:
    base_url: str
    api_key: str
    model: str
    timeout_s: float = 120.0
    max_retries: int = 2
    stream: bool = True
    temperature: float | None = None
    # masks secrets in provider error text before the user sees it
    redact: Callable[[str], str] | None = None
    # what a user is told while no model is configured (the host names its config file)
    setup_hint: str = ""
    # connections the client keeps open and alive: one per run that may call at once (the
    # host's pool size); None: the SDK's default (1,000, of which 100 are kept alive)
    connections: int | None = None


class LazyClient:
    """An `sdk_client` built at its first use (the SDK is the daemon's biggest import), one
    for the process, safe to share across threads: the transcription and embeddings clients."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float) -> None:
        self._args = (base_url, api_key, timeout_s)
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()

    def get(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = sdk_client(*self._args)
            return self._client

    def close(self) -> None:
        """Its connections closed, if it was ever built (blocking: call it off the loop)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def sdk_client(
    base_url: str, api_key: str, timeout_s: float, connections: int | None = None
) -> openai.OpenAI:
    """The openai SDK's client as every caller here uses it: no retries of its own (ours
    honour interrupts and outages), a placeholder key for a local server that wants none.
    ``connections``: as many connections kept alive, so a burst of that many calls neither
    waits for a connection nor, at its end, closes all but the SDK's 100 kept alive (the next
    burst would open them again, TLS handshakes and all), each for `KEEPALIVE_S` idle."""
    # imported here: it is the biggest import of the daemon (about 0.6 s), and /healthz
    # should not wait for it
    import httpx
    import openai

    from agent_core import wire

    limits = openai.DEFAULT_CONNECTION_LIMITS
    if connections is not None:
        # twice as many open: a run's sub-agents may call the model while it waits on them
        limits = httpx.Limits(
            max_connections=2 * connections,
            max_keepalive_connections=connections,
            keepalive_expiry=KEEPALIVE_S,
        )
    # its connections tell `cutoff` their sockets, so an interrupt can shut a request in flight
    http = openai.DefaultHttpxClient(transport=wire.transport(limits))
    return openai.OpenAI(
        base_url=base_url,
        api_key=api_key or "no-key",
        timeout=timeout_s,
        max_retries=0,
        http_client=http,
    )


def shards(connections: int | None) -> tuple[int, int | None]:
    """How many connection pools a client of ``connections`` uses, and each one's share.
    httpcore's pool looks at every connection it holds to place each request and again as
    each one ends, so one pool of 1,000 connections makes a burst of 1,000 calls cost a
    million such looks under its lock (half the process's CPU, measured): pools of at most
    `SHARD_CONNECTIONS` keep that small."""
    if connections is None or connections <= SHARD_CONNECTIONS:
        return 1, connections
    count = -(-connections // SHARD_CONNECTIONS)
    return count, -(-connections // count)


def _completions_url(base: httpx.URL) -> httpx.URL:
    """The chat completions endpoint under ``base``, as the SDK would join them."""
    return base.copy_with(raw_path=base.raw_path.rstrip(b"/") + b"/chat/completions")


class LLMClient:
    """Chat completions against one provider; safe to share across threads. Its connections
    are in pools of at most `SHARD_CONNECTIONS` (`shards`), filled one after the other."""

    def __init__(self, settings: LLMSettings, *, wait: Callable[[float], bool] | None = None):
        self.settings = settings
        count, self._per_shard = shards(settings.connections)
        self._clients: list[openai.OpenAI | None] = [None] * count
        self._in_flight = [0] * count  # calls going on each pool
        self._open = 0  # no pool before this one has room: where the search for one starts
        self._shard_lock = threading.Lock()
        self._local = threading.local()  # the pool the thread's call took
        self._url: httpx.URL | None = None  # the chat completions endpoint, absolute
        self._lock = threading.Lock()
        # the last real call's outcome, for the gateway's readiness and status
        self.endpoint = EndpointState()
        # `wait(seconds)` sleeps between retries and returns True if the run was interrupted
        self._wait = wait

    @property
    def configured(self) -> bool:
        """A hosted API needs a key; a local server (loopback or private address) may not."""
        return bool(self.settings.api_key) or _is_local(self.settings.base_url)

    def warm(self) -> None:
        """Import the SDK and build the client ahead of the first message (blocking)."""
        self._sdk()

    def _sdk(self) -> openai.OpenAI:
        """The SDK client of the pool this thread's call took (`_take_shard`), built on first
        use."""
        shard: int = getattr(self._local, "shard", 0)
        client = self._clients[shard]
        if client is None:
            with self._lock:
                client = self._clients[shard]
                if client is None:
                    s = self.settings
                    client = sdk_client(s.base_url, s.api_key, s.timeout_s, self._per_shard)
                    self._clients[shard] = client
        return client

    def close(self) -> None:
        for client in self._clients:
            if client is not None:
                client.close()

    def complete(
        self,
        messages: list[Message],
        tools: bytes | None = None,
        *,
        prefix: Sequence[bytes] = (),
        should_stop: Callable[[], bool] = lambda: False,
        on_delta: Callable[[str], None] | None = None,
        wait: Callable[[float], bool] | None = None,
        on_stop: OnStop | None = None,
    ) -> Completion:
        """One assistant turn, retried on 429/5xx/timeouts; raises `ModelError` at the end.

        ``prefix`` holds messages already encoded as JSON (`agent_core.history.encode`) that
        go before ``messages``: the system prompt and the history, encoded once, not per call.
        ``tools`` is the tools array as JSON, encoded once too (`ToolRegistry.specs_json`).
        ``on_stop(hook)`` registers ``hook`` to run (on the interrupting thread) when the run
        is interrupted and returns its remover: the hook shuts the request in flight.
        """
        body = self._body(prefix, messages, tools)
        attempt = 0
        backoff = Backoff(0.5, 8.0, factor=2.0, jitter=0.5)
        while True:
            if should_stop():  # checked before each request: none goes out once stopped
                return Completion(interrupted=True)
            try:
                done = self._complete_once(body, should_stop, on_delta, on_stop)
            except ModelError as exc:
                if should_stop():  # the request was cut off by the interrupt: no failure
                    return _with_usage(body, Completion(interrupted=True))
                where: dict[str, str | None] = {"url": self.settings.base_url}
                if exc.status is None:  # a status says it all; a network failure needs its cause
                    where["cause"] = _cause(exc)
                if not exc.retryable or attempt >= self.settings.max_retries:
                    self.endpoint.failed(exc)
                    log.warning(
                        "model.failed",
                        status=exc.status,
                        error=str(exc),
                        attempts=attempt + 1,
                        **where,
                    )
                    raise
                delay = exc.retry_after if exc.retry_after is not None else backoff.next()
                attempt += 1
                log.warning(
                    "model.retry",
                    status=exc.status,
                    attempt=attempt,
                    delay_s=round(delay, 2),
                    **where,
                )
                sleeper = wait or self._wait or _sleep
                if sleeper(delay) or should_stop():
                    return Completion(interrupted=True)
                continue
            if not done.interrupted:
                self.endpoint.succeeded()
            return _with_usage(body, done)

    def _body(self, prefix: Sequence[bytes], messages: list[Message], tools: bytes | None) -> bytes:
        """The request body as bytes, spliced from encoded parts (see `complete`)."""
        extra: dict[str, Any] = {"model": self.settings.model}
        if self.settings.temperature is not None:
            extra["temperature"] = self.settings.temperature
        if self.settings.stream:
            extra["stream"] = True
            extra["stream_options"] = {"include_usage": True}
        # all of them encoded already (an agent's turn): joined as they are, not copied first
        parts = [*prefix, *(encode(m) for m in messages)] if messages else prefix
        body = b'{"messages":[' + b",".join(parts) + b"]," + encode(extra)[1:]
        if tools:
            body = body[:-1] + b',"tools":' + tools + b"}"
        return body

    def _complete_once(
        self,
        body: bytes,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
        on_stop: OnStop | None = None,
    ) -> Completion:
        call = cutoff.begin()
        remove = on_stop(call.cut_off) if on_stop is not None else None
        self._local.shard = shard = self._take_shard()
        try:
            return self._request(body, should_stop, on_delta)
        finally:
            self._give_shard(shard)
            if remove is not None:
                remove()
            cutoff.end(call)

    def _take_shard(self) -> int:
        """The first pool with room (the least busy when none has): a few calls at a time
        all go to the first, and reuse its kept-alive connections. The search starts at the
        first pool that may have room: a burst of 1,000 calls fills 500 pools."""
        with self._shard_lock:
            busy, room = self._in_flight, self._per_shard or 1
            shard = next((i for i in range(self._open, len(busy)) if busy[i] < room), None)
            if shard is None:
                shard = busy.index(min(busy))
            else:
                self._open = shard
            busy[shard] += 1
            return shard

    def _give_shard(self, shard: int) -> None:
        with self._shard_lock:
            self._in_flight[shard] -= 1
            self._open = min(self._open, shard)

    def _request(
        self,
        body: bytes,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        import httpx
        import openai

        try:
            if self.settings.stream:
                return self._stream(body, should_stop, on_delta)
            return self._plain(body)
        except openai.APIStatusError as exc:
            raise status_error(exc, self.settings.api_key, self.settings.redact) from exc
        # httpx errors: raised while reading a stream, where the SDK no longer wraps them
        except (openai.APITimeoutError, httpx.TimeoutException) as exc:
            raise self._timed_out() from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            raise ModelError(
                "The model endpoint could not be reached; try again shortly.",
                retryable=True,
                kind="unreachable",
            ) from exc
        # a body of the wrong shape ({"choices": 7}) fails wherever it is first read
        except (
            openai.APIResponseValidationError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
        ) as exc:
            raise ModelError("The model sent a response I could not read.") from exc

    def _timed_out(self) -> ModelError:
        return ModelError(
            f"The model did not answer within {self.settings.timeout_s:g} s; try again shortly.",
            retryable=True,
            kind="timeout",
        )

    def _post(self, body: bytes) -> httpx.Response:
        """POST the body as built and hand back the raw streaming response.

        `chat.completions.create` would first run the SDK's request transform over every
        history message, about 0.1 ms each per call (75 ms at 400 messages), for nothing: our
        messages are already plain JSON. And the SDK's `Stream` stops reading at ``[DONE]``
        and closes the response, so no connection is ever reused (on a real endpoint, a TLS
        handshake per call). The SDK still does the transport, auth, retries-off and the
        mapping of HTTP errors to its exceptions; we only parse the body.
        """
        import httpx

        sdk = self._sdk()
        if self._url is None:  # every shard's client has the same base URL
            self._url = _completions_url(sdk.base_url)
        response: httpx.Response = sdk.post(
            # Absolute, and already parsed: the SDK joins a relative path to its base URL by
            # parsing both again, and parses an absolute one given as text (a tenth of a
            # call's CPU each). It takes the path as given (`FinalRequestOptions.construct`)
            # and makes it an `httpx.URL` (`_prepare_url`), which copies one without parsing.
            cast(str, self._url),
            content=body,
            cast_to=httpx.Response,
            stream=True,
            options={"headers": {"Content-Type": "application/json"}},
        )
        return response

    def _plain(self, body: bytes) -> Completion:
        response = self._post(body)
        try:
            body = json.loads(response.read())
        finally:
            response.close()
        return from_body(body)

    def _stream(
        self,
        body: bytes,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        import httpx

        # the SDK's timeout bounds each read, not the request: a trickle would never end
        deadline = time.monotonic() + self.settings.timeout_s
        acc = Accumulator(on_delta)
        response = self._post(body)
        try:
            for line in response.iter_lines():
                # read on past [DONE] to the end of the body, so the connection is reused
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                if should_stop():
                    acc.out.interrupted = True
                    break
                if time.monotonic() > deadline:
                    raise self._timed_out()
                acc.add(json.loads(line[5:]))
        except (httpx.TransportError, OSError):
            if not should_stop():
                raise
            acc.out.interrupted = True  # cut off by the interrupt: what came so far stands
        finally:
            response.close()
        return acc.finish()


def _with_usage(body: bytes, out: Completion) -> Completion:
    """A request cut off by an interrupt never gets its usage from the provider, which still
    read the prompt and wrote the text so far: those are estimated from their size (bytes per
    token as `agent_core.context` counts them), so a stopped turn does not report 0 tokens."""
    if out.interrupted and not out.usage:
        prompt = len(body) // _BYTES_PER_TOKEN
        written = len(out.content.encode()) // _BYTES_PER_TOKEN
        out.usage = {"prompt_tokens": prompt, "completion_tokens": written}
    return out


def _sleep(seconds: float) -> bool:
    threading.Event().wait(seconds)
    return False


def _is_local(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return addr.is_loopback or addr.is_private or addr.is_link_local


def _cause(exc: BaseException) -> str | None:
    """What lies under a `ModelError` (``ConnectError: [Errno 111] Connection refused``), for
    the operator: the user's message names only the kind of failure."""
    cause = exc.__cause__
    if cause is None:
        return None
    inner = cause.__cause__ or cause.__context__
    text = f"{type(cause).__name__}: {cause}"
    if inner is not None and str(inner) and str(inner) not in text:
        text += f" ({type(inner).__name__}: {inner})"
    return text[:300]
