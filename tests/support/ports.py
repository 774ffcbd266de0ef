"""Free TCP ports on 127.0.0.1 for the servers tests start (ZooKeeper, brokers).

One implementation serves tests, benchmarks and the demo: :func:`broker.testing.localrun.free_port`
(it never hands out the same port twice per process, so two servers asked for ports
before either binds cannot collide).
"""

from broker.testing.localrun import free_port

__all__ = ["free_port"]
