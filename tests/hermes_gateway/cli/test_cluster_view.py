"""`hermes gateway status`'s cluster lines: a role led through one of several numbered slots
(Slack's socket slots) names the slot; a single leader lease and a stand-by read as before."""

from __future__ import annotations

import io

from hermes_gateway.cli.cluster_view import render_cluster


def test_a_slot_led_role_names_its_slot() -> None:
    roles = {
        "slack:A1:socket": {"leading": True, "for_s": 12.0, "lease": "slack:A1:socket:7"},
        "telegram-poller:123": {"leading": True, "for_s": 3.5, "lease": "telegram-poller:123"},
        "slack:A2:socket": {"leading": False, "for_s": 0.0, "lease": ""},
    }
    out = io.StringIO()
    render_cluster({"instance": "web1", "available": True, "roles": roles}, out, False)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["slack:A1:socket", "leading", "for", "12.0", "s", "(slot", "7)"]
    assert lines[2].split() == ["slack:A2:socket", "standing", "by"]
    assert lines[3].split() == ["telegram-poller:123", "leading", "for", "3.5", "s"]
