"""The systemd template unit for several instances on one host (`hermes-gateway@PORT.service`):
the instance name is the control port; each instance gets its own home and cluster id."""

from __future__ import annotations

from hermes_gateway.cli.systemd import UnitParams, render_service

TEMPLATE = "hermes-gateway@.service"


def render_template(p: UnitParams) -> str:
    """The system unit, per instance: ``HERMES_HOME=<home>/%i`` (logs, media, the sentinel
    apart), ``HERMES_CONTROL_PORT=%i`` and ``HERMES_INSTANCE=%H-%i`` for the config to use
    (``control.port: ${HERMES_CONTROL_PORT}``, ``cluster.instance_id: ${HERMES_INSTANCE}``);
    a stable id lets a restarted instance read what its predecessor left on its channel."""
    out = []
    for line in render_service(p, user_unit=False).splitlines():
        if line.startswith("Description="):
            line = "Description=Hermes Gateway instance %i (control port %i, one of a cluster)"
        elif line == f"Environment=HERMES_HOME={p.home}":
            out.append(f"Environment=HERMES_HOME={p.home}/%i")
            out.append("Environment=HERMES_CONTROL_PORT=%i")
            line = "Environment=HERMES_INSTANCE=%H-%i"
        out.append(line)
    return "\n".join(out) + "\n"
