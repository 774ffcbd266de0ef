"""``logferry demo``: the paper's whole deployment on one machine, driven by ``etc/``.

Modules, one role each:

- :mod:`demo.configs`   the example configs of ``etc/`` rewritten for this machine
  (free ports, data dirs under the workdir, a host name and state dir per agent)
- :mod:`demo.processes` ZooKeeper, brokers, agents, the mirror and the loader as
  child processes, each with a log file, stopped with SIGTERM (bounded waits)
- :mod:`demo.hosts`     simulated web hosts writing access and application logs
  (Java stack traces included) and rotating them by rename while the agents tail them
- :mod:`demo.counting`  counts per stage: messages in a cluster, audit records,
  Parquet rows
- :mod:`demo.lake`      the analysis datacenter's HDFS (started in the background) and
  its Iceberg tables' locations and row counts (``--lake hdfs``, the default)
- :mod:`demo.query`     the query script the report names, and its lines on the lake
- :mod:`demo.dashboard` a real-time consumer group printing per-topic rates
- :mod:`demo.report`    the final report and its verdict
- :mod:`demo.run`       the orchestration
- :mod:`demo.keep`      ``--keep-running``: the pipeline flowing after the report until
  Ctrl-C; a dead broker, agent or mirror is reported, not fatal, and restarted on request

The broker package never imports the agent, the mirror or the loader: they run as
``python -m broker <command>`` subprocesses, exactly as a user would start them.
"""
