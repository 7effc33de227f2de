"""A manual clock for timing tests: `sleep` waits until the test moves the clock past its end."""

from __future__ import annotations

import asyncio


class ManualTime:
    """`sleep` waits until the test moves the clock past its end."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []  # every sleep asked for, in order
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        done = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, done))
        await done

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for end, done in list(self._sleepers):
            if end <= self.now and not done.done():
                done.set_result(None)
        await settle()


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)
