"""The browser tools' start: the first `browser_navigate` of a fresh pool (Playwright's driver
and Chromium started, a context and page made) against a second one of another session (a new
context in the running browser) and a third of the same session (the page reused), each on a
page served on loopback. Medians over ``-n`` fresh pools.

    unshare -rn sh -c 'ip link set lo up && exec python -m bench.browser [-n 5]'
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from hermes_gateway.browser.pool import BrowserPool
from tests.browser.site import Site
from tools.builtin import BrowserToolConfig
from tools.host import BrowserRequest


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def one_round(url: str) -> tuple[float, float, float]:
    """(first call, a second session's first call, the first session's second call) in ms."""
    settings = BrowserToolConfig(allowed_networks=("127.0.0.1/32",), timeout_s=120)
    pool = BrowserPool(settings)
    try:

        def navigate(session: str) -> Callable[[], object]:
            return lambda: pool.browse(BrowserRequest(session, "navigate", url=url), lambda: False)

        return timed(navigate("a")), timed(navigate("b")), timed(navigate("a"))
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.browser", description=__doc__)
    parser.add_argument("-n", type=int, default=5, help="fresh pools to measure (default 5)")
    rounds = parser.parse_args().n
    with Site("http://127.0.0.2:9/") as site:
        figures = [one_round(site.url) for _ in range(rounds)]
    first, other, again = (statistics.median(column) for column in zip(*figures, strict=True))
    print(f"first browser call (driver + Chromium start): {first:.0f} ms (median of {rounds})")
    print(f"another session's first call (new context):   {other:.0f} ms")
    print(f"the same session's next call (page reused):    {again:.0f} ms")
    print(f"first / next: {first / again:.1f}x")


if __name__ == "__main__":
    main()
