"""The standard ``OTEL_*`` environment variables, read into ``observability.traces`` where the
file leaves a key unset (the file wins), so the SDK is always given explicit values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote


def otel_defaults(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Fill ``data``'s ``observability.traces`` from ``env``'s OTEL_* variables."""
    found = _from_env(env)
    if not found:
        return
    observability = data.setdefault("observability", {})
    if not isinstance(observability, dict):
        return  # pydantic says what is wrong with it
    traces = observability.setdefault("traces", {})
    if isinstance(traces, dict):
        for key, value in found.items():
            traces.setdefault(key, value)


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if endpoint := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        found["endpoint"] = endpoint
    elif base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        found["endpoint"] = base.rstrip("/") + "/v1/traces"  # as the specification joins them
    headers = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS")
    if headers:
        found["headers"] = _pairs(headers)
    if name := env.get("OTEL_SERVICE_NAME"):
        found["service_name"] = name
    if attributes := env.get("OTEL_RESOURCE_ATTRIBUTES"):
        found["resource"] = _pairs(attributes)
    if env.get("OTEL_TRACES_SAMPLER_ARG"):
        found["sample_ratio"] = env["OTEL_TRACES_SAMPLER_ARG"]
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        found["enabled"] = False
    return found


def _pairs(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (values percent-encoded, as the specification writes them)."""
    pairs: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs[key.strip()] = unquote(value.strip())
    return pairs
