"""Cluster mode: coordination between gateway processes (session leases with fencing tokens,
leader leases for singleton work, the control channel to a session's owner; in-process by
default, on Redis when `cluster.redis_url` is set), and the runner's session leases built on it."""
