"""The shared vocabulary of logferry: each concept written once, here.

What common owns, one module per concept:

- ``errors``: the one error hierarchy (:class:`~broker.common.errors.LogferryError`
  and its subclasses) and the wire error codes.
- ``names``: the naming rule for topics, consumer groups and consumer ids, and the
  partition directory names built from them.
- ``retry``: exponential backoff (:class:`~broker.common.retry.Retry`) with jitter,
  optional max tries and deadline, and injectable sleep and clock.
- ``metrics``: counters and gauges, rendered for Prometheus; ``metrics_server`` their
  HTTP endpoint (imported only by a process that serves one: it costs ~50 ms of start).
- ``config``: loading and validating TOML configuration files.
- ``zk_connect``: the ZooKeeper connect string rule, ``host:port[,...][/chroot]``.
- ``acl``: access control lists (principal, operation, resource, allow or deny) and
  the authorizer's decision, sans IO.
- ``commands``: what every ``logferry`` command shares: exit codes, the one-line
  error format, default log levels.
- ``lake``: what the loader writes into a lake and its readers (the loader's audit, the
  console's landed tier) read: event hour names, the logferry properties of an Iceberg
  table's commits, the duplicates per hour they carry.
- ``webhdfs``: reading HDFS over the NameNode's WebHDFS (plain HTTP GETs, no JVM).
- ``certs``: a private CA and the certificates it issues, for a test or demo
  deployment (``logferry certs``, :mod:`broker.testing.security`); needs the ``certs``
  extra (``cryptography``), so it is imported only where a certificate is made.

It depends on the standard library and well-kept libraries only, never on the rest
of ``broker``. agent, mirror, hadoop_loader and demo may import it besides
``broker.client``; inside broker every layer may.
"""
