"""A reply's file read when its part is sent (`send_file`): still the regular file the model
named, not a link swapped in since, and within the platform's upload limit; or why not, in
words for the user."""

from __future__ import annotations

import os
import stat

from hermes_gateway.events import OutboundFile
from hermes_gateway.platform_spec import megabytes


def read_outbound(file: OutboundFile, limit: int) -> bytes | str:
    """The bytes of ``file`` (blocking: call it in a thread), or why it cannot be sent.

    The path was resolved inside the workspace when the model asked; a path that resolves
    elsewhere now (a link put in its place) is refused, and the file itself is opened without
    following a link, non-blocking (a FIFO put in its place cannot hang the send).
    """
    try:
        if os.path.realpath(file.path) != file.path:
            return "it is now a link to somewhere else"
        fd = os.open(file.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return "it no longer exists"
    except OSError as exc:
        return f"it cannot be opened ({exc.strerror})"
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "it is no longer a regular file"
        if info.st_size > limit:
            return f"it is {megabytes(info.st_size)}, over the {megabytes(limit)} limit here"
        os.set_blocking(fd, True)
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        return f"it is over the {megabytes(limit)} limit here"
    return data
