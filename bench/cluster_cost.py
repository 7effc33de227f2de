"""What cluster coordination costs one message: one in-process gateway on the local API and the
fake model, answering the same sequential messages without and with `cluster.redis_url`, in
alternating rounds; prints the ratios (with / without) of latency p50 and of CPU per message.

    unshare -rn sh -c 'ip link set lo up && exec python -m bench.cluster_cost unix:///PATH/redis.sock'

Both sides run in this process (gateway, fake model, client), so the CPU ratio includes their
shared cost: it understates the gateway's own increase, never overstates it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway

USERS = 20


async def side(
    workdir: Path, llm: FakeOpenAI, redis_url: str | None, n: int
) -> tuple[float, float]:
    """(latency p50 in ms, CPU ms per message) for ``n`` sequential messages over USERS users."""
    home = workdir / uuid.uuid4().hex[:8]
    home.mkdir()
    extra = {} if redis_url is None else {"cluster": {"redis_url": redis_url, "lease_s": 10}}
    config = make_config(home, llm.base_url, logging={"level": "warning", "file": False}, **extra)
    async with running_gateway(config) as (_gw, client):
        await client.chat("warm up", user="warm")
        latencies = []
        cpu = time.process_time()
        for i in range(n):
            started = time.perf_counter()
            reply = await client.chat(f"message {i}", user=f"user{i % USERS}")
            latencies.append(time.perf_counter() - started)
            assert reply["status"] == 200, reply
        cpu = time.process_time() - cpu
    return statistics.median(latencies) * 1000, cpu / n * 1000


async def main(redis_url: str, n: int, rounds: int) -> None:
    with FakeOpenAI(api_key="sk-fake") as llm, tempfile.TemporaryDirectory() as tmp:
        figures: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
        for i in range(rounds):  # alternating which goes first: neither gets the warm round
            order = [("without", None), ("with", redis_url)]
            for name, url in order if i % 2 == 0 else order[::-1]:
                figures[name].append(await side(Path(tmp), llm, url, n))
                print(name, *(f"{x:.2f}" for x in figures[name][-1]))
    p50 = {k: statistics.median(f[0] for f in v) for k, v in figures.items()}
    cpu = {k: statistics.median(f[1] for f in v) for k, v in figures.items()}
    print(f"{n} sequential messages over {USERS} sessions, {rounds} alternating rounds each")
    print(
        f"latency p50: {p50['without']:.2f} ms without, {p50['with']:.2f} ms with Redis: "
        f"ratio {p50['with'] / p50['without']:.2f}"
    )
    print(
        f"CPU per message: {cpu['without']:.2f} ms without, {cpu['with']:.2f} ms with Redis: "
        f"ratio {cpu['with'] / cpu['without']:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_cost", description=__doc__)
    parser.add_argument("redis_url")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.redis_url, args.n, args.rounds))
