"""``logferry demo --keep-running``: after the report, the pipeline keeps flowing until Ctrl-C.

The measured run ends with the agents stopped (their last audit records are part of
the report) and the hosts silent. To leave something worth exploring, this phase
starts the agents again (they resume from their checkpoints), lets the simulated
hosts write on at a gentle rate into the same files (rotation numbering continues),
and starts the ``dashboards`` group again. The mirror never stopped.

Then it watches: a broker, agent or the mirror that exits (a broker killed with
``kill -9`` to watch a failover, say) is reported once, with what it means for its
cluster, and everything else keeps running. Typing ``r`` and Enter (on a terminal),
or ``kill -USR1`` of the demo, starts every exited process again from the same
config, ports and data. Ctrl-C (or SIGTERM) ends the phase; the caller stops
everything.
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import sys
import threading
import time
from typing import Any

from demo.dashboard import GROUP, Dashboard
from demo.hosts import WebHost
from demo.pipeline import Pipeline, say
from demo.processes import BrokerChild, display_name

STATUS_S = 30.0
"""How often the phase prints one line of what is flowing."""
ROTATE_S = 120.0
"""How often the hosts rotate their files while the demo keeps running."""


class KeepRunning:
    """The phase after the report: restart the flow, print how to explore, watch."""

    def __init__(self, pipeline: Pipeline, writers: list[WebHost], stop: threading.Event, rate: float, command: str):
        self.pipeline = pipeline
        self.previous = writers
        self.stop = stop
        self.rate = rate
        self.command = command
        self.writers: list[WebHost] = []
        self.waiting: list[BrokerChild] = []
        """Restarted brokers not yet listening."""
        self.restart_requested = threading.Event()
        self.interactive = sys.stdin is not None and sys.stdin.isatty()

    # -- start the flow again -------------------------------------------------------------

    def resume(self) -> None:
        """Agents, host writers and the dashboard, running again."""
        p = self.pipeline
        p.restart_agents()
        per_host = self.rate / max(len(self.previous), 1)
        for old in self.previous:
            writer = WebHost(
                old.host,
                old.root,
                old.sources,
                per_host,
                math.inf,
                ROTATE_S,
                self.stop,
                seed=old.rng.randrange(1 << 30),
                vocabulary=old.vocabulary,
                rotated=old.rotations,
            )
            writer.start()
            self.writers.append(writer)
        if p.dashboard is not None and p.dashboard.is_alive():
            p.dashboard.stop(10.0)
        p.dashboard = Dashboard(p.zk_as("dashboard", "live"), p.topics, p.client("dashboard", "live"))
        p.dashboard.start()
        p.dashboard.ready.wait(30)

    def guide(self) -> str:
        """What to try, with this run's addresses, pids and metrics URLs."""
        p, lf, topic = self.pipeline, self.command, self.pipeline.topics[0]
        security = getattr(p, "security", None)
        live, analysis = ("", "") if security is None else (" $LIVE_AUTH", " $ANALYSIS_AUTH")
        lines = [
            f"--keep-running: the hosts keep writing ({self.rate:g} records/s from the loghub "
            "samples), the agents ship, the mirror copies, the dashboard group reads.",
            "Try, in another terminal:",
            "",
            f"  export LOGFERRY_ZK={p.live_zk}      # the live cluster",
        ]
        if security is not None:  # TLS + SCRAM as the read-only User:reader
            for name, dc in (("LIVE_AUTH", "live"), ("ANALYSIS_AUTH", "analysis")):
                table = security.sasl_table("reader", dc)
                zk_login = security.zookeeper_table("reader", dc)
                lines.append(
                    f'  export {name}="--tls-ca {security.pki.ca} --sasl-user reader '
                    f"--sasl-password-file {table['password_file']} --zk-user reader "
                    f'--zk-password-file {zk_login["password_file"]}"'
                )
        lines += [
            f"  {lf} topic list{live}",
            f"  {lf} topic describe {topic}{live}           # leaders and in-sync replicas",
            f"  {lf} consume {topic} --from latest --follow{live}   # records as the hosts write them",
            f"  {lf} group describe {GROUP}{live}            # the dashboard's lag",
            f"  {lf} topic list --zk {p.analysis_zk}{analysis}   # the analysis cluster",
        ]
        if p.mirror is not None:
            lines.append(f"  {lf} group describe {p.mirror_group}{live}    # the mirror's positions")
        lines += [
            "",
            "Watch a failover: kill a live broker, `topic describe` again (the other "
            "replica leads), and the --follow above goes on:",
        ]
        for dc, children in p.brokers.items():
            for b in children:
                lines.append(f"  kill -9 {b.pid!s:<8}   # {dc} broker {b.broker_id} ({b.address})")
        lines += ["", "Metrics (Prometheus text):"]
        for dc, children in p.brokers.items():
            for b in children:
                lines.append(f"  {dc + ' broker ' + str(b.broker_id):<20} {b.metrics_url}")
        for host, url in p.agent_metrics.items():
            lines.append(f"  {'agent ' + host:<20} {url}/metrics   (JSON: {url}/status)")
        if p.mirror_metrics:
            lines.append(f"  {'mirror':<20} {p.mirror_metrics}/metrics")
        if getattr(p, "console_url", ""):
            lines += ["", f"Web console (both clusters, live): {p.console_url}"]
        lake = getattr(p, "lake", None)
        if lake is not None and lake.ready and lake.hdfs is not None:
            lines += [
                "",
                f"HDFS runs meanwhile (web UI http://{lake.hdfs.http_address}/): "
                f"{p.workdir / 'query.py'} reads the Iceberg tables with Spark SQL.",
            ]
        restart = ("type r and Enter, or " if self.interactive else "") + f"kill -USR1 {os.getpid()}"
        lines += [
            "",
            f"A process that exits is reported and the rest keep running; to start it again: {restart}.",
            "Press Ctrl-C to stop everything.",
        ]
        return "\n".join(lines)

    # -- watch ---------------------------------------------------------------------------------

    def report_exits(self) -> None:
        """Say which watched process exited, and what it means; never stop the demo."""
        how = "type r and Enter" if self.interactive else f"kill -USR1 {os.getpid()}"
        for child, text in self.pipeline.exits():
            if child in self.waiting:
                self.waiting.remove(child)
            say(f"{text}; to start it again: {how}")

    def restart_exited(self) -> None:
        """Start every watched process that exited again (same argv, ports and data)."""
        dead = [c for c in self.pipeline.sup.children if c.exit_seen and not c.running()]
        if not dead:
            say("nothing to restart: every process is running")
        for child in dead:
            child.start()
            if isinstance(child, BrokerChild):
                self.waiting.append(child)
                say(
                    f"restarted {display_name(child)} (pid {child.pid}); it rejoins its cluster "
                    "when ZooKeeper has expired its old session"
                )
            else:
                say(f"restarted {display_name(child)} (pid {child.pid})")

    def report_returns(self) -> None:
        for child in list(self.waiting):
            if child.running() and child.ready():
                self.waiting.remove(child)
                say(f"{display_name(child)} is back on {child.address} (pid {child.pid})")

    def status_line(self) -> str:
        p = self.pipeline
        written = sum(c.records for w in self.writers for c in w.counts.values())
        up = "; ".join(
            f"{dc} brokers up: " + (", ".join(str(b.broker_id) for b in bs if b.running()) or "none")
            for dc, bs in p.brokers.items()
        )
        rates = p.dashboard.rates() if p.dashboard is not None else {}
        shown = ", ".join(f"{t} {r:,.1f}/s" for t, r in rates.items())
        return f"still running: hosts wrote {written:,} records since the report | {up} | dashboard reads {shown}"

    def _read_stdin(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for a line on a terminal; ``r`` asks for a restart."""
        if not self.interactive:
            time.sleep(timeout)
            return
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if ready:
            line = sys.stdin.readline()
            if not line:  # end of input: stop listening to it
                self.interactive = False
            elif line.strip().lower() in ("r", "restart"):
                self.restart_requested.set()

    def watch(self) -> None:
        """Until KeyboardInterrupt (Ctrl-C, or SIGTERM through the caller's handler)."""

        def on_usr1(signum: int, frame: Any) -> None:
            self.restart_requested.set()

        previous = signal.signal(signal.SIGUSR1, on_usr1)
        try:
            next_status = time.monotonic() + STATUS_S
            while True:
                self._read_stdin(1.0)
                self.report_exits()
                if self.restart_requested.is_set():
                    self.restart_requested.clear()
                    self.restart_exited()
                self.report_returns()
                for writer in self.writers:
                    if writer.error is not None:
                        say(f"host {writer.host} stopped writing: {writer.error!r}")
                        writer.error = None
                if time.monotonic() >= next_status:
                    next_status += STATUS_S
                    say(self.status_line())
        finally:
            signal.signal(signal.SIGUSR1, previous)


def keep_running(pipeline: Pipeline, writers: list[WebHost], stop: threading.Event, rate: float, command: str) -> None:
    """The whole phase; returns when the user presses Ctrl-C (or sends SIGTERM)."""
    phase = KeepRunning(pipeline, writers, stop, rate, command)
    # Killing a broker is the point here: the demo's one line says so, instead of the
    # dashboard group's retry warnings every few seconds until the leaders move.
    logging.getLogger("logferry.group").setLevel(logging.ERROR)
    try:
        phase.resume()
        print(flush=True)
        say(phase.guide())
        print(flush=True)
        phase.watch()
    except KeyboardInterrupt:  # the way out of --keep-running: not a failure
        print(flush=True)
