"""`ToolError`: raised by a tool for a failure the model should read and recover from."""

from __future__ import annotations


class ToolError(Exception):
    """A tool failed in a way the model can act on; its message becomes the observation."""
