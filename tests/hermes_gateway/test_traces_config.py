"""`observability.traces` from the file and from the standard OTEL_* environment variables."""

from __future__ import annotations

from pathlib import Path

import yaml

from hermes_gateway.config import Config, load_config


def _load(tmp_path: Path, traces: dict[str, object], env: dict[str, str]) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"observability": {"traces": traces}} if traces else {}))
    return load_config(path, {"HOME": str(tmp_path), **env})


def test_traces_are_off_by_default(tmp_path: Path) -> None:
    config = _load(tmp_path, {}, {})
    assert config.observability.traces.enabled is False


def test_otel_variables_fill_what_the_file_leaves_unset(tmp_path: Path) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc123xyz,x-team=core",
        "OTEL_SERVICE_NAME": "from-env",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    config = _load(tmp_path, {"enabled": True, "service_name": "from-file"}, env)
    traces = config.observability.traces
    assert traces.endpoint == "http://collector:4318/v1/traces"
    assert traces.headers == {"authorization": "Bearer abc123xyz", "x-team": "core"}
    assert traces.service_name == "from-file"  # the file wins
    assert traces.resource == {"deployment.environment": "prod"}
    assert traces.sample_ratio == 0.25
    assert "Bearer abc123xyz" in config.secrets()


def test_the_traces_endpoint_variable_wins_and_sdk_disabled_turns_them_off(tmp_path: Path) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://only-traces:4318/v1/traces",
        "OTEL_SDK_DISABLED": "true",
    }
    traces = _load(tmp_path, {}, env).observability.traces
    assert traces.endpoint == "http://only-traces:4318/v1/traces"
    assert traces.enabled is False
