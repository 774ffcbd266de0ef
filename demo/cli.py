"""``logferry demo``: the paper's whole deployment on this machine, from the configs in etc/.

One ZooKeeper with a chroot per datacenter; the live cluster's brokers (etc/live) and
the analysis cluster's (etc/analysis); simulated web hosts writing access and
application logs (Java stack traces, rotation by rename), each tailed by an agent
(etc/agent.toml); the mirror between the datacenters (etc/mirror.toml); a dashboard
consumer group printing per-topic rates; at the end the loader (etc/loader.toml)
landing everything into the analysis datacenter's HDFS (its own NameNode and DataNode)
as an Apache Iceberg table per topic, or as local Parquet with --lake file. Then a
report: every stage's count, the audit's completeness, throughput, the tables' hdfs://
locations and a Spark SQL query that reads them. Exit 1 if any stage's count differs.
With --keep-running the pipeline then keeps flowing until Ctrl-C.

The implementation lives in :mod:`demo`; this module only declares the command.
"""

from __future__ import annotations

import argparse
import importlib.util


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline of the paper on this machine and report",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument("--seconds", type=float, default=45.0, help="how long the hosts write (default 45)")
    p.add_argument("--rate", type=float, default=2000.0, help="log records per second over all hosts (default 2000)")
    p.add_argument("--hosts", type=int, default=2, help="simulated web hosts (default 2)")
    p.add_argument(
        "--rotate-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="rotate every log file this often (default: a third of --seconds)",
    )
    p.add_argument(
        "--audit-window",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="the agents' audit window (default 5; etc/agent.toml says 60)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="how long each stage may take to catch up after the hosts stop",
    )
    p.add_argument(
        "--loader-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long the Spark landing job may take (default 300)",
    )
    p.add_argument(
        "--lake",
        choices=("hdfs", "file"),
        default="hdfs",
        help="where the loader lands: hdfs (default) starts an HDFS in the workdir and lands an Iceberg table "
        "per topic there; file lands Parquet files under the workdir (no HDFS, no Iceberg)",
    )
    p.add_argument(
        "--workdir", default=".logferry/demo", help="where configs, data, logs and the lake go (wiped at start)"
    )
    p.add_argument(
        "--keep-running",
        action="store_true",
        help="after the report, keep the pipeline flowing (hosts write, agents ship, "
        "the mirror copies) until Ctrl-C, survive a broker's death, and print "
        "what to try: commands, broker pids, metrics URLs",
    )
    p.add_argument(
        "--keep-rate",
        type=float,
        default=20.0,
        metavar="RECORDS_PER_S",
        help="with --keep-running: records per second over all hosts (default 20)",
    )
    p.add_argument(
        "--zk-ensemble",
        type=int,
        choices=(3, 5),
        default=None,
        metavar="N",
        help="run ZooKeeper as an ensemble of N members (3 or 5), a real quorum on 127.0.42.1 .. N "
        "(default: one server); the pipeline goes on when one member dies",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no authentication, no ACLs (default: TLS + SCRAM + ACLs, "
        "each component its own principal; see etc/secured/)",
    )
    p.set_defaults(func=_run)


NEEDS = ("watchdog", "pyspark", "pyarrow")
"""Modules of the extras the demo's components need (agent, loader); it needs them all."""


def missing_modules() -> list[str]:
    """The modules of :data:`NEEDS` this install lacks."""
    return [name for name in NEEDS if importlib.util.find_spec(name) is None]


def _run(args: argparse.Namespace) -> int:
    from demo.processes import DemoError

    missing = missing_modules()
    if missing:  # say so before starting anything, not when the agents die
        raise DemoError(
            f"the demo runs every component and this install lacks {', '.join(missing)}: pip install 'logferry[all]'"
        )
    from demo.run import run

    return run(args)
