"""The line cap in front of an MCP server's stdout: `python -I -S linecap.py MAX -- ARGV` runs
ARGV with its stdin and stderr as they are, and passes its stdout on line by line, each line cut
at MAX bytes (the rest of it dropped). Standard library only, run as a file (no site, no
package import), so it starts in about 10 ms.

A client reading newline-delimited JSON keeps a whole line in memory before it parses it; a
server writing one line of 100 MB would make the gateway hold (and re-copy) all of it. Cut, the
line is simply invalid JSON, which the client reports as such."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_CHUNK = 65536


def relay(source: int, sink: int, cap: int) -> None:
    """Copy ``source`` to ``sink`` until end of file, each line cut at ``cap`` bytes."""
    length = 0  # bytes of the current line passed on so far
    while chunk := os.read(source, _CHUNK):
        out = bytearray()
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            room = max(0, cap - length)
            part = chunk[start:stop][:room]
            out += part
            length += len(part)
            if end < 0:
                break
            out += b"\n"
            length = 0
            start = end + 1
        if out:
            _write_all(sink, bytes(out))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    cap, command = int(argv[1]), argv[3:]
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    # a stop asked of this process is the server's
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, frame: child.send_signal(number))
    assert child.stdout is not None
    try:
        relay(child.stdout.fileno(), sys.stdout.fileno(), cap)
    except BrokenPipeError:  # the client is gone: so is the reason to run
        child.kill()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
