"""The sentinel's watcher is a second interpreter beside every gateway: it stays the standard
library's smallest part (no gateway module, no `typing`, ~1 MB of its ~10 MB)."""

from __future__ import annotations

import subprocess
import sys

from hermes_gateway.liveness import sentinel_watch


def test_the_watcher_imports_neither_the_gateway_nor_typing() -> None:
    # its module body, run the way the sentinel starts it (-I -S), without its main
    code = (
        "import sys\n"
        f"source = open({sentinel_watch.__file__!r}).read()\n"
        "exec(compile(source.replace('if __name__ == \"__main__\":', 'if False:'), 'w', 'exec'))\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    held = out.stdout.split()
    assert "signal" in held and "select" in held  # it ran
    assert [m for m in held if m.startswith("hermes_gateway") or m == "typing"] == []
