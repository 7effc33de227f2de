"""Coordination between gateway processes: session leases with fencing tokens, leader leases
for singleton work, and the control channel to a session's owner; in-process by default, on
Redis when `cluster.redis_url` is set."""
