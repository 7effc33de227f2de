"""The agent's tools: a registry that validates and dispatches calls, and the tools themselves.

Everything here is synchronous; tools run on the agent's worker thread.
"""

from tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry, default_registry

__all__ = ["Tool", "ToolContext", "ToolOutcome", "ToolRegistry", "default_registry"]
