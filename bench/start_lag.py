"""The event loop's lag at start with the heavy imports made before the loop starts (as
`hermes gateway run` does) and with them made on the loop (as before): a gateway child process
per start, on PostgreSQL and Redis when given, in alternating rounds; each start's largest lag
is the gateway watchdog's own maximum (`/status` loop_lag_ms.max) 2 s after it is ready.

    unshare -rn sh -c 'ip link set lo up && exec python -m bench.start_lag \\
        --store 'postgresql+asyncpg://hermes@/DB?host=/tmp/pg' --redis unix:///tmp/r/redis.sock'
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI

# the same start with `preload` made a no-op: every import happens where the code asks for it
ON_THE_LOOP = (
    "import sys, hermes_gateway.cli.preload as p; p.preload = lambda config: 0.0; "
    "from hermes_gateway.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


class Launched(GatewayProcess):
    """A gateway child started through ``-c ON_THE_LOOP`` instead of ``-m hermes_gateway``."""

    def start(self, wait: bool = True) -> GatewayProcess:
        import subprocess

        self._stderr = self.stderr_path.open("ab")
        argv = ["gateway", "run", "--config", str(self.config_path)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ON_THE_LOOP, *argv],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
        )
        if wait:
            self.wait_healthy()
        return self


def one_start(workdir: Path, config: dict[str, Any], before_loop: bool) -> float:
    """The largest loop lag (ms) of one start, up to 2 s after `gateway.ready`."""
    home = workdir / uuid.uuid4().hex[:8]
    kind = GatewayProcess if before_loop else Launched
    gateway = kind(home, config)
    try:
        gateway.start(wait=False)
        gateway.wait_healthy(timeout=60)
        deadline = time.monotonic() + 60
        while not any(e.get("event") == "gateway.ready" for e in gateway.log_events()):
            assert time.monotonic() < deadline, gateway.stderr()
            time.sleep(0.05)
        time.sleep(2.0)  # the model client's warm-up (its import, in a thread) included
        status = httpx.get(f"{gateway.url}/status", headers=gateway.operator, timeout=10).json()
        return float(status["loop_lag_ms"]["max"])
    finally:
        gateway.kill()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="", help="store.url (default: SQLite in the home)")
    parser.add_argument("--redis", default="", help="cluster.redis_url (default: no cluster)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    figures: dict[bool, list[float]] = {True: [], False: []}
    with FakeOpenAI(api_key="sk-fake") as llm, tempfile.TemporaryDirectory() as tmp:
        config: dict[str, Any] = {
            "model": {"base_url": llm.base_url, "api_key": "sk-fake"},
            "watchdog": {"interval_ms": 20},
        }
        if args.store:
            config["store"] = {"url": args.store}
        if args.redis:
            config["cluster"] = {"redis_url": args.redis}
        for i in range(args.rounds):  # alternating which goes first
            for before_loop in (True, False) if i % 2 == 0 else (False, True):
                figures[before_loop].append(one_start(Path(tmp), config, before_loop))
                label = "before the loop" if before_loop else "on the loop"
                print(f"round {i + 1}: imports {label}: max lag {figures[before_loop][-1]:.1f} ms")
    on, off = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"{args.rounds} starts each; median of each start's largest loop lag:")
    print(f"  imports on the loop {on:.1f} ms, before the loop {off:.1f} ms, ratio {off / on:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
