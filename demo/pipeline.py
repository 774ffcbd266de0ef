"""The running deployment of ``logferry demo``: its processes, addresses and configs.

:mod:`demo.run` builds a :class:`Pipeline` and drives it through the measured run;
:mod:`demo.keep` keeps it flowing afterwards (``--keep-running``). Both import it from
here, so neither imports the other's module for it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import time
from pathlib import Path
from typing import Any

from broker.common.errors import TopicExistsError
from broker.testing.localrun import free_port
from demo import configs
from demo.dashboard import GROUP, Dashboard
from demo.lake import HdfsLake
from demo.processes import BrokerChild, Child, DemoError, Supervisor, display_name, exit_message
from demo.security import DemoSecurity


def say(text: str) -> None:
    """One line of the demo's narration."""
    print(f"[demo] {text}", flush=True)


class Pipeline:
    """The running deployment: its processes, addresses and configs."""

    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.sup = Supervisor()
        self.zk = ""
        self.live_zk = ""
        self.analysis_zk = ""
        self.brokers: dict[str, list[BrokerChild]] = {"live": [], "analysis": []}
        self.agents: list[tuple[str, Child, Path]] = []
        self.mirror: Child | None = None
        self.mirror_group = "logferry-mirror"
        self.mirror_metrics = ""
        self.console_url = ""
        self.console: Child | None = None
        self.console_lake = ""
        """With ``--lake hdfs``: the warehouse the console's landed tier reads."""
        self.warehouse = workdir / "warehouse"
        """With ``--lake file``: the loader's output (Parquet and its manifests), the console's landed tier."""
        self.lake: HdfsLake | None = None
        """With ``--lake hdfs`` (the default): the HDFS the loader lands Iceberg tables into."""
        self.agent_metrics: dict[str, str] = {}
        """Host -> its agent's metrics base URL (``/metrics``, ``/status``)."""
        self.dashboard: Dashboard | None = None
        self.agent_doc = configs.load(configs.agent_template())
        self.topics = configs.agent_topics(self.agent_doc)
        self.audit_topic = self.agent_doc.get("audit", {}).get("topic", "_audit")
        self.notes: list[str] = []
        self.security: DemoSecurity | None = None
        """Certificates, users and ACLs (None: the plaintext demo, --insecure)."""

    def client(self, user: str, datacenter: str) -> dict[str, Any]:
        """``tls=``/``sasl=`` for a client of the demo's own process (none when insecure)."""
        return self.security.client(user, datacenter) if self.security else {}

    def sections(self, user: str, datacenter: str) -> dict[str, Any]:
        """``[tls]``/``[sasl]``/``[zookeeper]`` for a component's config (none when insecure)."""
        return self.security.client_sections(user, datacenter) if self.security else {}

    def zk_as(self, user: str, datacenter: str) -> str:
        """The cluster's connect string, logged in to ZooKeeper as ``user`` when secured
        (``admin`` is the cluster's owner)."""
        plain = self.live_zk if datacenter == "live" else self.analysis_zk
        if self.security is None:
            return plain
        if user == "admin":
            return self.security.zk_owner(datacenter)
        return self.security.zk_as(user, datacenter)

    @property
    def lake_kind(self) -> str:
        """``hdfs`` (Iceberg tables on the demo's HDFS) or ``file`` (local Parquet)."""
        return str(getattr(self.args, "lake", "hdfs"))

    # -- start ----------------------------------------------------------------------------

    def start_lake(self) -> None:
        """With ``--lake hdfs``: start the HDFS in the background (it is needed only when
        the loader runs; :mod:`demo.lake`)."""
        if self.lake_kind != "hdfs":
            return
        namespace = configs.load(configs.loader_template()).get("output", {}).get("namespace", "logferry")
        self.lake = HdfsLake(self.workdir, namespace)
        self.lake.start()
        say(f"HDFS: starting a NameNode and a DataNode in {self.lake.data_dir} (in the background; logs in hdfs/logs)")

    def check_lake(self) -> None:
        """Raise :class:`DemoError` (one line) if the HDFS failed to start: the demo ends
        then, not after the hosts wrote and the clusters drained."""
        if self.lake is not None:
            self.lake.failure()

    def stop_lake(self) -> list[str]:
        """Stop the HDFS (also one still starting); the problems seen."""
        return self.lake.stop() if self.lake is not None else []

    def start_clusters(self) -> None:
        self.zk = self.sup.start_zookeeper(self.workdir / "zookeeper", getattr(self.args, "zk_ensemble", None))
        self.live_zk = self.zk + configs.LIVE_CHROOT
        self.analysis_zk = self.zk + configs.ANALYSIS_CHROOT
        say(f"ZooKeeper on {self.zk}: chroots {configs.LIVE_CHROOT} and {configs.ANALYSIS_CHROOT}")
        if not getattr(self.args, "insecure", False):
            template = configs.mirror_template()  # its group gets the mirror's group ACL
            if template.exists():
                self.mirror_group = configs.load(template).get("mirror", {}).get("group", self.mirror_group)
            self.security = DemoSecurity(self.workdir)
            self.security.setup(
                {"live": self.live_zk, "analysis": self.analysis_zk},
                [*self.topics, self.audit_topic],
                GROUP,
                self.mirror_group,
            )
            say(f"security: {self.security.summary()}")
        for dc, zk in (("live", self.live_zk), ("analysis", self.analysis_zk)):
            for template in configs.broker_templates(dc):
                broker_id, broker, log = configs.broker_settings(template)
                child = BrokerChild(
                    f"{dc}-{template.stem}",
                    broker_id,
                    zk,
                    self.workdir,
                    broker,
                    log,
                    datacenter=dc,
                    sections=(self.security.broker_sections(dc) if self.security else None),
                )
                self.sup.add(child)
                self.brokers[dc].append(child)
        for dc, children in self.brokers.items():
            if not children:
                raise DemoError(f"no broker configs in etc/{dc}/")
            for child in children:
                child.wait_ready(60.0)
                say(
                    f"{dc} broker {child.name} on {child.address} "
                    f"(from etc/{dc}/{child.name.split('-', 1)[1]}.toml; pid {child.pid}, "
                    f"metrics {child.metrics_url})"
                )
        if self.security is not None:
            changed = self.security.secure_zookeeper()
            say(
                f"ZooKeeper ACLs set as the owner on both clusters ({changed} znodes changed): "
                "each group's offsets writable only by its principal"
            )

    def create_topics(self) -> None:
        from broker.client import Admin

        _, broker, _ = configs.broker_settings(configs.broker_templates("live")[0])
        partitions = int(broker.get("num_partitions", 4))
        factor = int(broker.get("default_replication_factor", 1))
        with Admin(zk=self.zk_as("admin", "live"), **self.client("admin", "live")) as admin:
            for topic in [*self.topics, self.audit_topic]:
                with contextlib.suppress(TopicExistsError):
                    admin.create_topic(topic, partitions)
        say(
            f"live topics: {', '.join(self.topics)} and {self.audit_topic} "
            f"({partitions} partitions each, replication factor {factor})"
        )

    def start_mirror(self) -> None:
        if not (configs.ROOT / "mirror" / "cli.py").exists():
            self.notes.append("the mirror is not built yet: the loader read the live cluster")
            say("mirror: not built yet (mirror/cli.py missing); the loader will read the live cluster")
            return
        template = configs.mirror_template()
        if template.exists():
            doc = configs.load(template)
            origin = template
        else:
            doc = configs.DEFAULT_MIRROR
            origin = Path("<built-in mirror config>")
            self.notes.append(
                "etc/mirror.toml does not exist yet: the demo used a built-in mirror config (every topic)"
            )
        port = free_port()
        doc = configs.mirror_config(doc, self.live_zk, self.analysis_zk, self.workdir / "mirror" / "status.json", port)
        doc.setdefault("mirror", {})["audit_window_s"] = self.args.audit_window  # as the agents'
        doc.setdefault("source", {}).update(self.sections("mirror", "live"))
        doc.setdefault("target", {}).update(self.sections("mirror", "analysis"))
        self.mirror_metrics = f"http://127.0.0.1:{port}"
        self.mirror_group = doc.get("mirror", {}).get("group", "logferry-mirror")
        path = configs.write(self.workdir / "config" / "mirror.toml", doc, origin)
        self.mirror = self.sup.add(
            Child.logferry("mirror", ["mirror", "--config", str(path)], self.workdir / "logs" / "mirror.log")
        )
        time.sleep(1.0)
        if not self.mirror.running():
            raise DemoError(f"the mirror exited at start:\n{self.mirror.log_tail()}")
        say(
            f"mirror: {configs.LIVE_CHROOT} -> {configs.ANALYSIS_CHROOT} (pid {self.mirror.pid}, "
            f"metrics {self.mirror_metrics}/metrics)"
        )

    def start_console(self, port: int | None = None) -> None:
        """The web console over both clusters (docs/console.md), if its extra is installed;
        secured, it reads as the read-only User:reader (TLS + SCRAM, per [[cluster]]).
        Its landed tier reads the lake: the Parquet manifests (``--lake file``) or the
        Iceberg tables' metadata over the NameNode's WebHDFS (``--lake hdfs``; until HDFS
        is up the page says it cannot reach it)."""
        import importlib.util

        if importlib.util.find_spec("aiohttp") is None:
            say("console: not started (install it with: pip install 'logferry[console]')")
            return
        port = port or free_port()
        clusters = [
            {"name": dc, "zk_connect": zk, **self.sections("reader", dc)}
            for dc, zk in (("live", self.live_zk), ("analysis", self.analysis_zk))
        ]
        doc: dict[str, Any] = {"console": {"host": "127.0.0.1", "port": port}, "cluster": clusters}
        # the landed tier, against the cluster the loader reads (docs/console.md)
        loader = configs.load(configs.loader_template())
        lake: dict[str, Any] = {
            "cluster": "analysis" if self.mirror else "live",
            "timezone": loader.get("load", {}).get("timezone", "UTC"),
        }
        hdfs = self.lake.planned() if self.lake is not None else None
        if self.lake_kind == "file":
            # made now so the page says "nothing landed yet" until the loader's first run
            self.warehouse.mkdir(parents=True, exist_ok=True)
            doc["lake"] = [{"path": str(self.warehouse), "format": "parquet", **lake}]
            landed = f"landed Parquet from {self.warehouse}"
        elif self.lake is not None and hdfs is not None:
            self.console_lake = self.lake.warehouse
            webhdfs = f"http://{hdfs.http_address}"
            doc["lake"] = [
                {"path": self.console_lake, "format": "iceberg", "namespace": self.lake.namespace, "webhdfs": webhdfs}
                | lake
            ]
            landed = f"landed Iceberg tables of {self.console_lake}, read over WebHDFS {webhdfs}"
        else:
            landed = "no landed tier: the HDFS's ports were not chosen yet"
        path = configs.write(self.workdir / "config" / "console.toml", doc, configs.ETC / "console.toml")
        self.console = self.sup.add(
            Child.logferry("console", ["console", "--config", str(path)], self.workdir / "logs" / "console.log"),
            watched=False,
        )
        self.console_url = f"http://127.0.0.1:{port}/"
        who = " as User:reader (TLS+SCRAM)" if self.security is not None else ""
        say(f"console: {self.console_url} (live and analysis clusters{who}; {landed})")

    def follow_lake(self) -> None:
        """Once HDFS runs: if its start had to take other ports than the console was given
        (one was taken meanwhile, :func:`broker.testing.hdfs.start_on_free_ports`), start
        the console again on its port, reading the HDFS that runs."""
        if self.console is None or self.lake is None or self.console_lake == self.lake.warehouse:
            return
        self.console.stop(10.0)
        self.start_console(int(self.console_url.rstrip("/").rsplit(":", 1)[1]))

    def start_agents(self, hosts: list[str]) -> None:
        for host in hosts:
            root = self.workdir / "hosts" / host
            state = self.workdir / "agents" / host
            port = free_port()
            doc = configs.agent_config(self.agent_doc, host, root, state, self.live_zk, self.args.audit_window, port)
            doc.update(self.sections("agent", "live"))
            self.agent_metrics[host] = f"http://127.0.0.1:{port}"
            path = configs.write(self.workdir / "config" / f"agent-{host}.toml", doc, configs.agent_template())
            child = self.sup.add(
                Child.logferry(
                    f"agent {host}", ["agent", "--config", str(path)], self.workdir / "logs" / f"agent-{host}.log"
                )
            )
            self.agents.append((host, child, state / "status.json"))
        self._wait_agents()
        for host, child, _ in self.agents:
            say(
                f"agent {host} tails {root_hint(self.agent_doc)} under hosts/{host} (pid {child.pid}, "
                f"metrics {self.agent_metrics[host]}/metrics)"
            )

    def _wait_agents(self) -> None:
        for _, child, status in self.agents:
            child.wait_until(functools.partial(agent_running, status), 60.0, "running status")

    def restart_agents(self) -> None:
        """Start the agents stopped for the report again; they resume from their checkpoints."""
        for _, child, status in self.agents:
            status.unlink(missing_ok=True)  # wait for the new process's "running"
            child.start()
        self._wait_agents()

    def exits(self) -> list[tuple[Child, str]]:
        """The processes that exited unexpectedly since the last call, and what to say.

        A broker's death is news, not the end of the demo: the message says which
        brokers its cluster continues with.
        """
        out = []
        for child in self.sup.exits():
            if isinstance(child, BrokerChild):
                survivors = [b.broker_id for b in self.brokers[child.datacenter] if b.running()]
                text = exit_message(display_name(child), child.pid, child.returncode(), child.datacenter, survivors)
            else:
                text = exit_message(child.name, child.pid, child.returncode())
            out.append((child, f"{text} (log {child.log_path})"))
        return out

    # -- stop ----------------------------------------------------------------------------------

    def stop_agents(self) -> int:
        """SIGTERM every agent (it flushes and publishes its last audit); return acked total."""
        for _, child, _ in self.agents:
            child.terminate()
        total = 0
        for host, child, status in self.agents:
            code = child.wait(60.0)
            if code is None:
                code = child.stop(10.0)
            if code not in (0, None):
                self.notes.append(f"agent {host} exited with {code}: {child.log_path}")
            total += int(read_status(status).get("counters", {}).get("messages_acked", 0))
        return total


def root_hint(doc: dict[str, Any]) -> str:
    return ", ".join(s["pattern"] if isinstance(s["pattern"], str) else s["pattern"][0] for s in doc.get("sources", []))


def read_status(path: Path) -> dict[str, Any]:
    """An agent's status file ({} while it is missing or half written)."""
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document


def agent_running(status: Path) -> bool:
    """Whether the agent writing ``status`` says it runs."""
    return read_status(status).get("state") == "running"
