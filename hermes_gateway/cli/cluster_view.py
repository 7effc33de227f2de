"""The cluster part of `hermes gateway status`: one line about this instance, and with
`--cluster` every instance, who leads which role (who polls which bot) and lease ages."""

from __future__ import annotations

from typing import Any, TextIO


def render_cluster(c: dict[str, Any], out: TextIO, everything: bool) -> None:
    coordination = "ok" if c.get("available") else "UNREACHABLE (new messages wait)"
    owned = c.get("owned") or {}
    count = c.get("owned_count", len(owned))
    out.write(
        f"cluster      instance {c.get('instance')}, coordination {coordination}, "
        f"{count} session lease(s) here\n"
    )
    shares = c.get("shares") or {}
    for role, led in sorted((c.get("roles") or {}).items()):
        if role.rpartition(":")[0] in shares:
            continue  # one line per split below, not one per part
        state = f"leading for {led['for_s']} s" if led.get("leading") else "standing by"
        if led.get("leading") and led.get("lease", role) != role:  # one of several slots
            state += f" (slot {led['lease'].rsplit(':', 1)[-1]})"
        out.write(f"  {role:<28} {state}\n")
    for role, split in sorted(shares.items()):
        held = ", ".join(map(str, split["held"])) or "none"
        notes = [
            f"{what} {', '.join(map(str, split.get(key) or []))}"
            for key, what in (
                ("handing_over", "handing over:"),
                ("kept_unleased", "lease lost, still connected:"),
            )
            if split.get(key)
        ]
        note = f" ({'; '.join(notes)})" if notes else ""
        out.write(f"  {role:<28} serving {held} of {split['count']}{note}\n")
    if not everything:
        return
    survey = c.get("survey")
    if not survey:
        out.write("  no survey of the cluster yet (coordination unreachable since start?)\n")
        return
    out.write(f"instances    (surveyed {c.get('survey_age_s')} s ago)\n")
    for name, info in survey["instances"].items():
        beat = info["heartbeat_s"]
        seen = "no heartbeat" if beat < 0 else f"heartbeat {beat} s ago"
        me = "  (this one)" if name == c.get("instance") else ""
        out.write(f"  {name:<28} {info['sessions']} session lease(s), {seen}{me}\n")
    out.write("leaders\n")
    if not survey["leaders"]:
        out.write("  none\n")
    for role, led in survey["leaders"].items():
        out.write(f"  {role:<28} {led['owner']} (held {led['age_s']} s, {led['left_s']} s left)\n")
    for role, split in sorted(shares.items()):
        out.write(f"{role}  (who serves each part)\n")
        for n in range(split["count"]):
            led = survey["leaders"].get(f"{role}:{n}")
            out.write(f"  {n:<28} {led['owner'] if led else 'nobody (being taken over)'}\n")
    if owned:
        shown = f", the first {len(owned)}" if count > len(owned) else ""
        out.write(f"sessions here (s left on the lease{shown})\n")
        for key, left in sorted(owned.items()):
            out.write(f"  {key:<28} {left}\n")
