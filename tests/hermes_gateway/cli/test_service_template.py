"""The template unit for N instances on one host: accepted by systemd-analyze for an instance,
the copy in deploy/ current, and each instance's port, home and id reaching the config."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hermes_gateway.cli.service_template import TEMPLATE, render_template
from hermes_gateway.config import load_config
from tests.hermes_gateway.cli.test_service import EXAMPLE, ROOT, params


def test_an_instance_of_the_template_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    assert shutil.which("systemd-analyze"), "systemd-analyze is needed (apt-get install systemd)"
    (tmp_path / TEMPLATE).write_text(render_template(params(tmp_path)))
    instance = tmp_path / "hermes-gateway@8081.service"
    instance.symlink_to(TEMPLATE)
    cmd = ["systemd-analyze", "verify", "--man=no", str(instance)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    noise = [line for line in proc.stderr.splitlines() if "hermes-gateway" in line]
    assert proc.returncode == 0 and noise == [], proc.stderr


def test_each_instance_has_its_own_home_port_and_id() -> None:
    lines = render_template(EXAMPLE).splitlines()
    assert {
        "Environment=HERMES_HOME=/var/lib/hermes/%i",
        "Environment=HERMES_CONTROL_PORT=%i",
        "Environment=HERMES_INSTANCE=%H-%i",
        "Restart=always",
        "RestartPreventExitStatus=78",
    } <= set(lines)
    assert "Environment=HERMES_HOME=/var/lib/hermes" not in lines


def test_the_template_in_deploy_is_current() -> None:
    assert (ROOT / "deploy/systemd" / TEMPLATE).read_text() == render_template(EXAMPLE)


def test_the_config_takes_the_instances_port_and_id(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "control:\n  port: ${HERMES_CONTROL_PORT:-8642}\n"
        "cluster:\n  instance_id: ${HERMES_INSTANCE:-}\n"
    )
    env = {"HOME": str(tmp_path), "HERMES_HOME": str(tmp_path / "8081")}
    config = load_config(path, {**env, "HERMES_CONTROL_PORT": "8081", "HERMES_INSTANCE": "h-8081"})
    assert config.control.port == 8081 and config.cluster.instance_id == "h-8081"
    assert config.home_path == tmp_path / "8081"
    alone = load_config(path, env)  # the same config outside the template: the defaults
    assert alone.control.port == 8642 and alone.cluster.instance_id == ""
