"""`hermes doctor`'s check of the signal-cli daemon: it answers (``version``) and the
configured account is registered on it (``listAccounts``)."""

from __future__ import annotations

from typing import Any

import httpx

from adapters.signal.rpc import RPC_PATH
from adapters.signal.settings import SignalConfig
from hermes_gateway.platforms import token_verdict


def probe(section: SignalConfig, http: httpx.Client) -> str:
    url = section.daemon_url.rstrip("/") + RPC_PATH
    version = _call(http, url, "version")
    accounts = http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "listAccounts"})

    def who(data: dict[str, Any]) -> str | None:
        listed = data.get("result")
        numbers = (
            {a.get("number") for a in listed if isinstance(a, dict)}
            if isinstance(listed, list)
            else set()
        )
        if section.account not in numbers:
            return None
        return f"{section.account} on signal-cli {version or '(version unknown)'}"

    if accounts.status_code == 200 and isinstance(_json(accounts), dict):
        data = _json(accounts)
        if "error" not in data and who(data) is None:
            # the daemon answered, without the account: say so in the verdict's words
            why = f"{section.account} is not registered or linked on this signal-cli daemon"
            accounts = httpx.Response(200, json={"description": why}, request=accounts.request)
    return token_verdict(accounts, who)


def _call(http: httpx.Client, url: str, method: str) -> str:
    response = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method})
    data = _json(response)
    result = data.get("result") if isinstance(data, dict) else None
    return str(result.get("version") or "") if isinstance(result, dict) else ""


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
