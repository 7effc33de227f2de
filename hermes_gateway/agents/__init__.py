"""The gateway's side of the agent: the bounded per-session agent cache, building agents from
the config, and the services tools ask of the gateway (approvals, history search, downloads)."""
