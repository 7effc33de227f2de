"""Tools from MCP servers (docs/mcp.md): the connections, on a thread of their own, and the
tools they add to a session's registry. Imported only when `mcp.servers` names a server."""
