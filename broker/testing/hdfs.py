"""Run Apache Hadoop's NameNode and DataNode as two plain child processes: a real HDFS.

Why: the loader lands into HDFS in production (the paper's "nightly Spark loads to
Hadoop"), and its exactly-once commit rests on HDFS's own rename, create and lease
semantics, which a local file system does not have. Tests and developers need a real
one they can start, stop, kill and restart on free ports, as :mod:`broker.testing.
zkserver` gives them ZooKeeper. The servers are Hadoop's own classes from the jars
``scripts/install-jars.sh apache-hadoop`` resolves (:data:`JARS`), a version whose RPC
the Hadoop client inside the pinned pyspark speaks (:data:`CLIENT_VERSIONS`), so Spark
talks to them with its own client.
Everything lives in one data directory::

    <data_dir>/conf/                core-site.xml, hdfs-site.xml, log4j.properties: written on
                                    every start, first on the classpath (also a HADOOP_CONF_DIR
                                    for clients); conf/webapps/ holds the empty web roots the
                                    servers' HTTP endpoints want (the jars ship none)
    <data_dir>/name/                the NameNode's metadata (formatted on the first start)
    <data_dir>/data/                the DataNode's blocks
    <data_dir>/logs/namenode.log    each server's log (log4j), and its JVM's stdout and stderr
    <data_dir>/logs/datanode.log    in namenode.out, datanode.out (crashes, classpath errors)
    <data_dir>/namenode.pid         the running servers' pids, so another process
    <data_dir>/datanode.pid         (``logferry hdfs stop``) finds them later

Both servers listen on ``127.0.0.1`` only: the NameNode's RPC port (the ``hdfs://``
URI's) and its HTTP port (JMX, how readiness and status are read without a JVM) are
fixed by the caller; the DataNode takes free ports, which it registers with the NameNode.

The pure helpers (:func:`render_site_xml`, :func:`read_site_xml`, :func:`parse_jmx`)
carry the decisions and are unit tested without Java; the class wraps the processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from xml.sax.saxutils import escape

from broker.common.errors import LogferryError
from broker.common.webhdfs import DEFAULT_HTTP_PORT, WebHdfs
from broker.testing.jars import JarSet
from broker.testing.jvm import QUICK_JVM_OPTIONS, java_executable, java_major
from broker.testing.zkserver import _cmdline, _pid_alive, port_is_free, tail_lines

HADOOP_VERSION = "3.5.0"
"""The servers' version; keep in step with ``hadoop.version`` in
scripts/jars/apache-hadoop/pom.xml (tests/unit/test_hdfs.py checks both). It was
pyspark 4.3's client; the pin moved pyspark to 4.1 (for Apache Iceberg's Spark runtime,
pyproject.toml), whose client is 3.4.2 (:data:`CLIENT_VERSIONS`), and the servers stayed:
Hadoop keeps its client-server RPC compatible within a major version, and the loader's
HDFS tests (tests/loader/test_hdfs_integration.py) pass with the 3.4.2 client against
these 3.5.0 servers."""

CLIENT_VERSIONS = ("3.4.2", "3.5.0")
"""Hadoop clients inside pyspark (``pyspark/jars/hadoop-client-api-<version>.jar``) the
servers were checked with: 3.4.2 is pyspark 4.1's, 3.5.0 pyspark 4.3's."""

JARS = JarSet("apache-hadoop", "Apache Hadoop", HADOOP_VERSION)
MIN_JAVA_MAJOR = 17  # Hadoop 3.5's classes are Java 17 class files.

NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
DFSADMIN_CLASS = "org.apache.hadoop.hdfs.tools.DFSAdmin"

DEFAULT_PORT = 8020
INSTALL_HINT = "run `make hadoop-jars` (scripts/install-jars.sh apache-hadoop)"
JAVA_HINT = "run `make system-deps` (or as root: apt-get install -y default-jre-headless)"

# Bounds of every wait loop in this module (seconds).
POLL_INTERVAL = 0.2
HTTP_TIMEOUT = 2.0
KILL_WAIT = 10.0
ADMIN_TIMEOUT = 60.0

ROLES = ("namenode", "datanode")


class HdfsError(LogferryError):
    """The local HDFS could not be started, stopped or asked."""

    retriable = False


class HdfsNotInstalledError(HdfsError):
    """Java or Hadoop's jars are missing; the message says what to run."""


class HdfsStartError(HdfsError):
    """A server exited or the file system was not ready in time; carries the log tail."""

    def __init__(self, message: str, log_path: Path | None = None, log_tail: str = ""):
        full = f"{message}\n--- log tail ({log_path}) ---\n{log_tail}" if log_tail else message
        super().__init__(full)
        self.summary = message
        self.log_path = log_path


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class HadoopInstall:
    """The Java runtime and the jars the servers run from."""

    java: Path
    classpath: str
    """Hadoop's jars as one ``-cp`` entry (the conf directory goes before it)."""


def discover_install(env: Mapping[str, str] | None = None) -> HadoopInstall:
    """Find Java (>= :data:`MIN_JAVA_MAJOR`) and Hadoop's jars, or say what to do."""
    if not JARS.resolved():
        raise HdfsNotInstalledError(f"{JARS.missing_reason()}; {INSTALL_HINT}")
    java = java_executable(env)
    if java is None:
        raise HdfsNotInstalledError(f"no Java runtime found (no `java` on PATH, JAVA_HOME unset or empty); {JAVA_HINT}")
    major = java_major(java)
    if major is None or major < MIN_JAVA_MAJOR:
        raise HdfsNotInstalledError(
            f"{java} is Java {major or '?'}, Hadoop {HADOOP_VERSION} needs Java {MIN_JAVA_MAJOR} or newer; "
            "set JAVA_HOME to a newer JDK"
        )
    return HadoopInstall(java, JARS.classpath())


# ------------------------------------------------------------------------ config files


def render_site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` with ``properties`` in order."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<!-- Written by logferry (broker/testing/hdfs.py) on every start; edits are overwritten. -->",
        "<configuration>",
    ]
    for name, value in properties.items():
        lines.append(f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>")
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"


def read_site_xml(path: Path) -> dict[str, str]:
    """The properties of a ``*-site.xml`` ({} when it does not exist or does not parse)."""
    import xml.etree.ElementTree as ET  # noqa: N817 (only here: the command's parser stays light)

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out: dict[str, str] = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None and value is not None:
            out[name.strip()] = value.strip()
    return out


def core_site(host: str, port: int, data_dir: Path) -> dict[str, str]:
    """``core-site.xml``: the default file system is this NameNode."""
    return {
        "fs.defaultFS": f"hdfs://{host}:{port}",
        "hadoop.tmp.dir": str(data_dir / "tmp"),
    }


def hdfs_site(host: str, http_port: int, data_dir: Path) -> dict[str, str]:
    """``hdfs-site.xml`` for one NameNode and one DataNode on ``host``.

    Choices and why: one replica (one DataNode); no safe-mode extension, so a NameNode
    leaves safe mode as soon as its DataNode reported its blocks instead of 30 s later;
    a heartbeat each second, so the DataNode registers quickly; every DataNode port free
    (``:0``), so several HDFS run side by side (one per test worker).
    """
    return {
        "dfs.namenode.name.dir": (data_dir / "name").as_uri(),
        "dfs.datanode.data.dir": (data_dir / "data").as_uri(),
        "dfs.replication": "1",
        "dfs.namenode.http-address": f"{host}:{http_port}",
        "dfs.namenode.secondary.http-address": f"{host}:0",
        "dfs.datanode.address": f"{host}:0",
        "dfs.datanode.http.address": f"{host}:0",
        "dfs.datanode.ipc.address": f"{host}:0",
        "dfs.namenode.safemode.extension": "0",
        "dfs.heartbeat.interval": "1",
    }


def render_log4j_properties() -> str:
    """log4j 1.2 (reload4j) settings: each server logs to the file its JVM names."""
    return "\n".join(
        [
            "# Written by logferry (broker/testing/hdfs.py) on every start.",
            "log4j.rootLogger=INFO, FILE",
            "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
            "log4j.appender.FILE.File=${logferry.log.file}",
            "log4j.appender.FILE.MaxFileSize=10MB",
            "log4j.appender.FILE.MaxBackupIndex=2",
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n",
            # the HTTP servers' per-request and auth-secret chatter
            "log4j.logger.org.apache.hadoop.security.authentication.server.AuthenticationFilter=ERROR",
            "log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR",
        ]
    )


def _live_addresses(live_nodes: Any) -> tuple[str, ...]:
    """``xferaddr`` of each entry of NameNodeInfo's ``LiveNodes`` (a JSON object as text)."""
    try:
        nodes = json.loads(live_nodes) if isinstance(live_nodes, str) else {}
    except ValueError:
        return ()
    return tuple(sorted(str(n.get("xferaddr", name)) for name, n in nodes.items() if isinstance(n, dict)))


def parse_jmx(text: str) -> dict[str, Any]:
    """The beans of a ``/jmx?qry=...`` answer merged into one dict."""
    merged: dict[str, Any] = {}
    for bean in json.loads(text).get("beans", []):
        merged.update(bean)
    return merged


@dataclass(frozen=True)
class HdfsState:
    """What the NameNode says of itself (its JMX beans)."""

    live_datanodes: int
    safe_mode: str
    """Empty when off, else the NameNode's own sentence (why and how to leave it)."""
    version: str
    capacity_bytes: int
    used_bytes: int
    files: int
    datanodes: tuple[str, ...] = ()
    """The data transfer addresses of the live DataNodes (a restarted one has a new port)."""
    remaining_bytes: int = 0
    """Room left for blocks on the live DataNodes (0 when they are full)."""

    @property
    def ready(self) -> bool:
        """A DataNode is live and safe mode is off: files can be written."""
        return self.live_datanodes > 0 and not self.safe_mode


# ------------------------------------------------------------------------------ servers


class LocalHdfs:
    """One NameNode and one DataNode on ``host``, keeping everything in ``data_dir``.

    ``start()`` formats a new data dir, spawns both JVMs and waits until a file can be
    written; ``stop()`` (SIGTERM, then SIGKILL) and ``kill()`` (SIGKILL, a crash) end
    them. Each server can also be stopped, killed and started alone
    (:meth:`kill_server`, :meth:`start_server`): a DataNode killed mid-write, a NameNode
    restarted during a load. ``start(detach=True)`` puts the servers in sessions of
    their own so they outlive this process; :meth:`from_data_dir` finds them again.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = DEFAULT_PORT,
        http_port: int = DEFAULT_HTTP_PORT,
        host: str = "127.0.0.1",
        *,
        heap_mb: int = 256,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.http_port = http_port
        self.host = host
        self.heap_mb = heap_mb
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._detach = False

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalHdfs:
        """A handle on the HDFS of ``data_dir``, its ports read from its config files
        (the defaults when it never started)."""
        conf = Path(data_dir) / "conf"
        core, hdfs = read_site_xml(conf / "core-site.xml"), read_site_xml(conf / "hdfs-site.xml")
        host, port, http_port = "127.0.0.1", DEFAULT_PORT, DEFAULT_HTTP_PORT
        default_fs = core.get("fs.defaultFS", "")
        if default_fs.startswith("hdfs://") and default_fs.rpartition(":")[2].isdigit():
            host, _, text = default_fs[len("hdfs://") :].rpartition(":")
            port = int(text)
        http = hdfs.get("dfs.namenode.http-address", "")
        if http.rpartition(":")[2].isdigit():
            http_port = int(http.rpartition(":")[2])
        return cls(data_dir, port, http_port, host)

    def __repr__(self) -> str:
        return f"LocalHdfs({str(self.data_dir)!r}, uri={self.uri!r}, pids={self.pids()})"

    # -- paths and addresses

    @property
    def uri(self) -> str:
        """``hdfs://host:port``: the file system's URI (append a path)."""
        return f"hdfs://{self.host}:{self.port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def conf_dir(self) -> Path:
        """The servers' configuration; a ``HADOOP_CONF_DIR`` for clients too."""
        return self.data_dir / "conf"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def log_path(self, role: str) -> Path:
        """The server's own log (``namenode`` or ``datanode``)."""
        return self.log_dir / f"{role}.log"

    def out_path(self, role: str) -> Path:
        """The server JVM's stdout and stderr."""
        return self.log_dir / f"{role}.out"

    def pid_path(self, role: str) -> Path:
        return self.data_dir / f"{role}.pid"

    # -- state

    def pid(self, role: str) -> int | None:
        """Pid of the data dir's running ``role`` server (ours or another process's), or None."""
        proc = self._procs.get(role)
        if proc is not None:
            if proc.poll() is None:
                return proc.pid
            del self._procs[role]
        try:
            text = self.pid_path(role).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not text.isdigit() or not _pid_alive(int(text)):
            return None
        # A pid from an old pidfile may now belong to another program: check it is this
        # data dir's server.
        cmdline = _cmdline(int(text))
        main = NAMENODE_CLASS if role == "namenode" else DATANODE_CLASS
        if cmdline is not None and (main not in cmdline or str(self.conf_dir) not in cmdline):
            return None
        return int(text)

    def pids(self) -> dict[str, int | None]:
        return {role: self.pid(role) for role in ROLES}

    def is_running(self) -> bool:
        """Whether either server of this data dir is alive."""
        return any(pid is not None for pid in self.pids().values())

    def _namenode_http(self, path: str) -> str:
        """The body of a GET of ``path`` (with its query) on the NameNode's HTTP port;
        OSError (urllib's HTTPError among them) when it does not answer."""
        import urllib.request

        url = f"http://{self.http_address}{path}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as answer:  # noqa: S310 (http to 127.0.0.1)
            return str(answer.read().decode())

    def state(self) -> HdfsState:
        """The NameNode's view (live DataNodes, safe mode, ...); OSError when it does not answer."""
        import urllib.parse

        beans = parse_jmx(self._namenode_http(f"/jmx?qry={urllib.parse.quote('Hadoop:service=NameNode,name=*')}"))
        if "NumLiveDataNodes" not in beans:
            raise OSError(f"the NameNode on {self.http_address} does not report its state yet")
        return HdfsState(
            live_datanodes=int(beans.get("NumLiveDataNodes", 0)),
            safe_mode=str(beans.get("Safemode", "")),
            version=str(beans.get("Version", "?")).split(",")[0],
            capacity_bytes=int(beans.get("CapacityTotal", 0)),
            used_bytes=int(beans.get("CapacityUsed", 0)),
            files=int(beans.get("FilesTotal", 0)),
            datanodes=_live_addresses(beans.get("LiveNodes")),
            remaining_bytes=int(beans.get("CapacityRemaining", 0)),
        )

    def file_count(self, path: str) -> int:
        """Files below ``path`` (an absolute HDFS path, counted recursively), asked of the
        NameNode over WebHDFS (``GETCONTENTSUMMARY``): a condition tests can poll without
        a JVM, e.g. "a load's first data file exists". 0 when ``path`` does not exist;
        OSError when the NameNode does not answer."""
        try:
            return WebHdfs(self.http_address, timeout=HTTP_TIMEOUT).file_count(path)
        except FileNotFoundError:
            return 0

    def read_file(self, path: str, limit: int = 16 << 20) -> bytes:
        """The bytes of the file ``path`` (an absolute HDFS path) over WebHDFS (``OPEN``:
        the NameNode redirects to the DataNode holding it), at most ``limit`` bytes; for
        small files read without a JVM (an Iceberg table's metadata, say).
        FileNotFoundError when it does not exist; OSError when HDFS does not answer
        (:class:`broker.common.webhdfs.WebHdfs`)."""
        return WebHdfs(self.http_address, timeout=HTTP_TIMEOUT * 5).open(path, limit)

    def log_tail(self, role: str, lines: int = 30) -> str:
        """The last ``lines`` of a server's log, plus its JVM's output if it wrote any."""
        parts = tail_lines(self.log_path(role), lines)
        out = tail_lines(self.out_path(role), lines)
        if out:
            parts += [f"--- {self.out_path(role).name} (JVM stdout/stderr) ---", *out]
        return "\n".join(parts) if parts else f"(no log yet in {self.log_dir})"

    # -- lifecycle

    def write_config(self) -> None:
        """Create the data dir and write the conf directory."""
        for path in (self.conf_dir, self.log_dir, *(self.conf_dir / "webapps" / w for w in WEBAPPS)):
            path.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(render_site_xml(core_site(self.host, self.port, self.data_dir)))
        (self.conf_dir / "hdfs-site.xml").write_text(
            render_site_xml(hdfs_site(self.host, self.http_port, self.data_dir))
        )
        (self.conf_dir / "log4j.properties").write_text(render_log4j_properties())

    def command(self, install: HadoopInstall, role: str, main: str, *args: str) -> list[str]:
        """A JVM command line for one of Hadoop's main classes (a small heap, C1 and the
        serial GC: :mod:`broker.testing.jvm`)."""
        return [
            str(install.java),
            "-Xms16m",
            f"-Xmx{self.heap_mb}m",
            *QUICK_JVM_OPTIONS,
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configuration={(self.conf_dir / 'log4j.properties').as_uri()}",
            f"-Dlogferry.log.file={self.log_path(role)}",
            f"-Dhadoop.log.dir={self.log_dir}",
            "-cp",
            f"{self.conf_dir}:{install.classpath}",
            main,
            *args,
        ]

    def formatted(self) -> bool:
        return (self.data_dir / "name" / "current" / "VERSION").is_file()

    def start(self, timeout: float = 90.0, *, detach: bool = False) -> None:
        """Start both servers and return once a file can be written (a live DataNode,
        safe mode off); on failure nothing is left running. Formats a new data dir first."""
        if self.is_running():
            raise HdfsError(f"HDFS already runs for {self.data_dir} ({self._pids_text()}); stop it first")
        install = discover_install()
        for port in (self.port, self.http_port):
            if not port_is_free(self.host, port):
                raise HdfsStartError(f"port {port} on {self.host} is already in use; choose another port")
        self.write_config()
        self._detach = detach
        deadline = time.monotonic() + timeout
        if not self.formatted():
            self._format(install, timeout)
        try:
            for role in ROLES:
                self.start_server(role, install=install, wait=False)
            self.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.kill()
            raise

    def _format(self, install: HadoopInstall, timeout: float) -> None:
        """``NameNode -format``: a new, empty namespace in ``name/``."""
        log = self.log_dir / "format.log"
        command = self.command(install, "format", NAMENODE_CLASS, "-format", "-nonInteractive", "-force")
        with log.open("ab") as out:
            try:
                done = subprocess.run(
                    command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=timeout, check=False
                )
                code: int | None = done.returncode
            except subprocess.TimeoutExpired:
                code = None
        if code != 0 or not self.formatted():
            raise HdfsStartError(
                f"formatting the NameNode in {self.data_dir / 'name'} failed (exit {code})",
                log,
                "\n".join(tail_lines(log, 30) + tail_lines(self.log_path("format"), 30)),
            )

    def start_server(self, role: str, *, install: HadoopInstall | None = None, wait: bool = True) -> None:
        """Start one server (``namenode`` or ``datanode``); with ``wait``, return once the
        file system is ready again (for a DataNode: once the NameNode knows it at its new
        address, since a NameNode counts a killed DataNode live for minutes)."""
        if self.pid(role) is not None:
            raise HdfsError(f"the {role} of {self.data_dir} already runs (pid {self.pid(role)})")
        install = install or discover_install()
        main = NAMENODE_CLASS if role == "namenode" else DATANODE_CLASS
        before: tuple[str, ...] = ()
        if wait and role == "datanode":
            with contextlib.suppress(OSError, ValueError):
                before = self.state().datanodes
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.out_path(role).open("ab") as out:
            proc = subprocess.Popen(
                self.command(install, role, main),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,  # a JVM crash report (hs_err_pid*.log) lands here
                start_new_session=self._detach,
            )
        self._procs[role] = proc
        tmp = self.pid_path(role).with_suffix(".pid.tmp")
        tmp.write_text(f"{proc.pid}\n")
        tmp.replace(self.pid_path(role))
        if wait:
            self.wait_ready(not_at=before)

    def wait_ready(self, timeout: float = 60.0, not_at: tuple[str, ...] = ()) -> None:
        """Wait until :attr:`HdfsState.ready` (and, with ``not_at``, a live DataNode at
        another address than those), at most ``timeout`` s; fails fast, with the log
        tail, when a server exits meanwhile."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        for _ in range(int(timeout / POLL_INTERVAL) + 2):
            for role in ROLES:
                proc = self._procs.get(role)
                if proc is not None and proc.poll() is not None:
                    del self._procs[role]
                    self._remove_pidfile(role)
                    raise HdfsStartError(
                        f"the {role} exited with code {proc.returncode} while starting ({self.log_path(role)})",
                        self.log_path(role),
                        self.log_tail(role),
                    )
            try:
                state = self.state()
                if state.ready and (not not_at or not set(state.datanodes) <= set(not_at)):
                    return
                last = f"{state.live_datanodes} live DataNode(s), safe mode: {state.safe_mode or 'off'}"
            except (OSError, ValueError) as exc:
                last = f"no answer on http://{self.http_address}/jmx ({exc})"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(POLL_INTERVAL, remaining))
        raise HdfsStartError(
            f"HDFS on {self.uri} was not ready within {timeout:g}s: {last}",
            self.log_path("namenode"),
            self.log_tail("namenode") + "\n--- datanode ---\n" + self.log_tail("datanode"),
        )

    def dfsadmin(self, *args: str) -> str:
        """Run ``hdfs dfsadmin ARGS`` (Hadoop's DFSAdmin, e.g. ``-safemode enter``) against
        this NameNode; its output, or HdfsError with it when it fails."""
        install = discover_install()
        command = self.command(install, "dfsadmin", DFSADMIN_CLASS, "-fs", self.uri, *args)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=ADMIN_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise HdfsError(f"dfsadmin {' '.join(args)} did not finish within {ADMIN_TIMEOUT:g}s") from None
        if result.returncode != 0:
            raise HdfsError(f"dfsadmin {' '.join(args)} failed: {(result.stderr or result.stdout).strip()[-500:]}")
        return result.stdout

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM both servers (DataNode first), SIGKILL after ``timeout``; returns once gone."""
        for role in reversed(ROLES):
            self._end(role, signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL both, like a crash."""
        for role in reversed(ROLES):
            self._end(role, signal.SIGKILL, KILL_WAIT)

    def stop_server(self, role: str, timeout: float = 10.0) -> None:
        """SIGTERM one server (SIGKILL after ``timeout``)."""
        self._end(role, signal.SIGTERM, timeout)

    def kill_server(self, role: str) -> None:
        """SIGKILL one server: ``kill -9`` of a NameNode or a DataNode."""
        self._end(role, signal.SIGKILL, KILL_WAIT)

    def __enter__(self) -> LocalHdfs:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals

    def _pids_text(self) -> str:
        return ", ".join(f"{role} pid {pid}" for role, pid in self.pids().items() if pid is not None)

    def _end(self, role: str, sig: signal.Signals, timeout: float) -> None:
        """Send ``sig`` to one server; escalate to SIGKILL after ``timeout``; reap; drop pidfile."""
        proc = self._procs.pop(role, None)
        pid = proc.pid if proc is not None and proc.poll() is None else (None if proc else self.pid(role))
        if pid is not None:
            for current, wait in ((sig, timeout), (signal.SIGKILL, KILL_WAIT)):
                with contextlib.suppress(ProcessLookupError):
                    if proc is not None:
                        proc.send_signal(current)
                    else:
                        os.kill(pid, current)
                if self._wait_gone(proc, pid, wait):
                    break
            else:
                raise HdfsError(f"the {role} (pid {pid}) survived SIGKILL for {KILL_WAIT:.0f}s")
        self._remove_pidfile(role)

    @staticmethod
    def _wait_gone(proc: subprocess.Popen[bytes] | None, pid: int, wait: float) -> bool:
        if proc is not None:
            try:
                proc.wait(wait)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + wait
        for _ in range(int(wait / 0.05) + 2):
            if not _pid_alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return False

    def _remove_pidfile(self, role: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.pid_path(role).unlink()


WEBAPPS = ("hdfs", "datanode", "secondary", "static")
"""Web roots the servers' HTTP endpoints look up on the classpath (``webapps/<name>``);
Hadoop's jars ship none (its distribution has them as a folder), and the JMX servlet
needs only that they exist."""


def pyspark_hadoop_version() -> str | None:
    """The version of the Hadoop client inside the installed pyspark, or None."""
    from broker.testing.jvm import spark_jars_dir

    jars = spark_jars_dir()
    if jars is None:
        return None
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name[len("hadoop-client-api-") : -len(".jar")]
    return None


def start_on_free_ports(
    data_dir: Path,
    timeout: float,
    *,
    attempts: int = 3,
    detach: bool = False,
    made: Callable[[LocalHdfs], None] | None = None,
) -> LocalHdfs:
    """An HDFS in ``data_dir``, started on free ports of 127.0.0.1 and taking writes.

    A port is free when chosen and bound a moment later; another program may take it in
    between (the tests and the demo run beside others), so a start that fails on a port
    in use is tried again on new ports, at most ``attempts`` times, in the same data dir
    (formatted once). ``made`` sees each :class:`LocalHdfs` before it starts, so a
    caller on another thread can stop one still starting.
    """
    from broker.testing.localrun import free_port

    last: HdfsStartError | None = None
    for _ in range(max(1, attempts)):
        hdfs = LocalHdfs(data_dir, free_port(), free_port())
        if made is not None:
            made(hdfs)
        try:
            hdfs.start(timeout, detach=detach)
            return hdfs
        except HdfsStartError as exc:
            last = exc
            if "already in use" not in str(exc) and "BindException" not in str(exc):
                raise
    assert last is not None
    raise last


__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_PORT",
    "CLIENT_VERSIONS",
    "HADOOP_VERSION",
    "JARS",
    "HadoopInstall",
    "HdfsError",
    "HdfsNotInstalledError",
    "HdfsStartError",
    "HdfsState",
    "LocalHdfs",
    "core_site",
    "discover_install",
    "hdfs_site",
    "parse_jmx",
    "pyspark_hadoop_version",
    "read_site_xml",
    "render_site_xml",
    "start_on_free_ports",
]
