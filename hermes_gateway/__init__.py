"""Hermes Gateway: a long-running multi-platform gateway daemon for an AI agent."""

__version__ = "0.1.0"
