"""The coordinator the config asks for: on Redis when `cluster.redis_url` is set, else the
in-process one; and this instance's id."""

from __future__ import annotations

import os
import socket

from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.cluster.local import LocalCoordinator
from hermes_gateway.config.schema import ClusterConfig


def instance_id(config: ClusterConfig) -> str:
    """`cluster.instance_id`, or this host's name and process id."""
    return config.instance_id or f"{socket.gethostname()}:{os.getpid()}"


def coordinator(config: ClusterConfig) -> Coordinator:
    me = instance_id(config)
    if not config.redis_url:
        return LocalCoordinator(me, config.lease_s)
    from hermes_gateway.cluster.on_redis import RedisCoordinator  # redis-py only when asked for

    return RedisCoordinator(config.redis_url, me, config.lease_s)
