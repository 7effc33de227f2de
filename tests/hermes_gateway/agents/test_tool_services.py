"""The tools' host services are declared once (`tools.host.ToolHost`'s fields, each naming the
need that opens it) and lent by name: the gateway's providers lend every declared service,
with no list of them kept anywhere else."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config
from tools.errors import ToolError
from tools.hindsight import UNAVAILABLE
from tools.host import HOST_NEEDS, ToolHost, narrowed


class Weather:
    def search_history(self, session_key: str, query: str, limit: int) -> list[object]:
        return []

    user_of = "not a callable"


def test_the_needs_are_read_from_the_declared_services() -> None:
    declared = {f.name: f.metadata["need"] for f in fields(ToolHost)}
    assert {name for names in HOST_NEEDS.values() for name in names} == set(declared)
    assert all(declared[name] == need for need, names in HOST_NEEDS.items() for name in names)
    assert HOST_NEEDS["memory"] == ("user_of", "retain", "recall", "reflect", "forget")
    assert HOST_NEEDS["delegation"] == HOST_NEEDS["tools"] == ()


def test_a_service_is_lent_by_the_first_provider_with_a_callable_of_its_name() -> None:
    first, second = Weather(), Weather()
    host = ToolHost.provided_by(object(), first, second)
    assert host.search_history == first.search_history
    assert host.user_of is None and host.ask_approval is None  # not callable; not provided
    assert narrowed(host, frozenset({"approvals"})).search_history is None


async def test_the_gateway_lends_every_declared_service(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    gw = Gateway(make_config(tmp_path, fake_llm.base_url))
    host = gw.agent_factory.host
    assert host is not None
    assert [f.name for f in fields(host) if getattr(host, f.name) is None] == []
    # no platform enables the archive's tools here: its services say it is not available
    assert gw.memory.service is None and host.recall is not None
    with pytest.raises(ToolError, match=UNAVAILABLE):
        host.recall("telegram:dm:1", "anything", 3)
