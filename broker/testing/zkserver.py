"""Run Debian's ZooKeeper server as a plain child process, without systemd.

Why: the integration tests need a real ZooKeeper they can start, stop, kill and
restart on a free port, and developers need one for ``logferry demo``. Debian's
``zookeeper`` package ships the server jars under ``/usr/share/java`` but its service
wants systemd and a fixed port, so :class:`LocalZooKeeper` starts
``org.apache.zookeeper.server.quorum.QuorumPeerMain`` itself with a ``zoo.cfg`` of its
own, everything kept in one data directory::

    <data_dir>/zoo.cfg            written on every start (port, tick, 4lw whitelist)
    <data_dir>/log4j.properties   sends the server's log to zookeeper.log
    <data_dir>/zookeeper.log      the server's log (log4j, rolled at 10 MB)
    <data_dir>/zookeeper.out      the JVM's stdout/stderr (crashes, classpath errors)
    <data_dir>/zookeeper.pid      pid of the running server, so another process
                                  (``logferry zk stop``) can find it later
    <data_dir>/version-2/         ZooKeeper's snapshots and transaction logs

The pure helpers (:func:`render_zoo_cfg`, :func:`find_classpath`,
:func:`parse_java_major`, :func:`parse_srvr`) carry the decisions and are unit tested
without Java; the class is a thin process wrapper around them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from broker.common.errors import ZooKeeperError
from broker.testing.jvm import QUICK_JVM_OPTIONS, java_executable, java_major, parse_java_major

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DEBIAN_JAVA_DIR = Path("/usr/share/java")
MIN_JAVA_MAJOR = 11  # ZooKeeper 3.8 (Debian bookworm) needs Java 11 or newer.

# Jars named explicitly on the classpath. Debian's zookeeper.jar carries a manifest
# Class-Path naming the rest of its runtime (netty, jetty, metrics-core, snappy,
# commons-cli, jackson under /usr/share/java), so the JVM finds those by itself.
ZOOKEEPER_JARS: tuple[str, ...] = (
    "zookeeper.jar",  # the server (package libzookeeper-java)
    "zookeeper-jute.jar",  # its wire records
    "slf4j-api.jar",  # the logging facade ZooKeeper writes to
    "slf4j-log4j12.jar",  # binding: without one slf4j silently drops every line
    "log4j-1.2.jar",  # the backend that writes zookeeper.log
)

# Netty jars the TLS port needs that zookeeper.jar's manifest does not name (Debian's
# libnetty-java, a dependency of libzookeeper-java: the manifest names only what the
# plaintext Netty path loads).
NETTY_TLS_JARS: tuple[str, ...] = (
    "netty-codec.jar",  # ByteToMessageDecoder, under the SslHandler
    "netty-resolver.jar",
    "netty-transport-native-unix-common.jar",
)

APT_PACKAGES: tuple[str, ...] = ("zookeeper", "default-jre-headless")
APT_COMMAND = "apt-get install -y --no-install-recommends " + " ".join(APT_PACKAGES)
INSTALL_HINT = f"run `make system-deps` (or as root: `{APT_COMMAND}`)"

CONFIG_NAME = "zoo.cfg"
LOG4J_NAME = "log4j.properties"
LOG_NAME = "zookeeper.log"
OUT_NAME = "zookeeper.out"
PID_NAME = "zookeeper.pid"

# Bounds of every wait loop in this module (seconds).
POLL_INTERVAL = 0.05
FOUR_LETTER_TIMEOUT = 2.0
KILL_WAIT = 10.0
_MAX_4LW_REPLY = 1 << 20


class ZooKeeperNotInstalledError(ZooKeeperError):
    """Java or Debian's ZooKeeper jars are missing; the message says what to install."""

    retriable = False


class ZooKeeperStartError(ZooKeeperError):
    """The server exited or did not answer in time; carries its log tail and path."""

    retriable = False

    def __init__(self, message: str, log_path: Path | None = None, log_tail: str = ""):
        full = f"{message}\n--- ZooKeeper log tail ({log_path}) ---\n{log_tail}" if log_tail else message
        super().__init__(full)
        self.summary = message
        self.log_path = log_path
        self.log_tail = log_tail


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class ZooKeeperInstall:
    """Where the Java runtime and the server jars are, as found on this machine."""

    java: Path
    """The ``java`` executable that runs the server."""
    java_major: int
    """Its major version (17 for ``17.0.15``)."""
    classpath: tuple[Path, ...]
    """Jars passed with ``-cp`` (see :data:`ZOOKEEPER_JARS`)."""

    @property
    def classpath_arg(self) -> str:
        """The classpath as the JVM's ``-cp`` wants it."""
        return os.pathsep.join(str(p) for p in self.classpath)


def find_java(env: Mapping[str, str] | None = None) -> Path:
    """The ``java`` to run: ``$JAVA_HOME/bin/java`` when set, else the one on PATH."""
    found = java_executable(env)
    if found is None:
        raise ZooKeeperNotInstalledError(
            f"no Java runtime found (no `java` on PATH, JAVA_HOME unset or empty); {INSTALL_HINT}"
        )
    return found


def java_major_version(java: Path) -> int:
    """The major version of ``java`` (run once per executable)."""
    major = java_major(java)
    if major is None:
        raise ZooKeeperNotInstalledError(f"cannot run {java} -version or tell its version from it; {INSTALL_HINT}")
    return major


def find_classpath(java_dir: Path = DEBIAN_JAVA_DIR) -> tuple[Path, ...]:
    """The server's jars in Debian's layout under ``java_dir``; names any that are missing."""
    missing = [name for name in ZOOKEEPER_JARS if not (java_dir / name).is_file()]
    if missing:
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper server jars missing from {java_dir}: {', '.join(missing)}; {INSTALL_HINT}"
        )
    return tuple(java_dir / name for name in ZOOKEEPER_JARS)


def discover_install(java_dir: Path = DEBIAN_JAVA_DIR, env: Mapping[str, str] | None = None) -> ZooKeeperInstall:
    """Find Java (>= :data:`MIN_JAVA_MAJOR`) and the jars, or say what to install."""
    classpath = find_classpath(java_dir)
    java = find_java(env)
    major = java_major_version(java)
    if major < MIN_JAVA_MAJOR:
        raise ZooKeeperNotInstalledError(
            f"{java} is Java {major}, ZooKeeper needs Java {MIN_JAVA_MAJOR} or newer; "
            f"set JAVA_HOME to a newer JDK or {INSTALL_HINT}"
        )
    return ZooKeeperInstall(java=java, java_major=major, classpath=classpath)


# ------------------------------------------------------------------------ config files

NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
KEYSTORE_NAME = "zk-keystore.pem"
"""The server's key followed by its certificate chain: a PEM keystore as ZooKeeper reads it."""
CLIENT_AUTH = {"none": "none", "optional": "want", "required": "need"}
"""logferry's ``client_auth`` words -> ZooKeeper's ``ssl.clientAuth``."""


@dataclass(frozen=True)
class ServerTls:
    """TLS on a ZooKeeper server's ``secureClientPort``, from PEM files.

    ``client_auth`` takes the words of a broker's ``[tls]`` (``none``, ``optional``,
    ``required``); any but ``none`` needs ``ca_file``.
    """

    secure_port: int
    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise ZooKeeperError(f"client_auth {self.client_auth!r}: must be one of {', '.join(CLIENT_AUTH)}")
        if self.client_auth != "none" and self.ca_file is None:
            raise ZooKeeperError(
                f"client_auth {self.client_auth!r} needs a CA file to check client certificates against"
            )
        if not 0 < self.secure_port < 65536:
            raise ZooKeeperError(f"ZooKeeper secure port {self.secure_port} is out of range (1-65535)")

    def zoo_cfg_lines(self, data_dir: Path, host: str = "127.0.0.1") -> list[str]:
        """The zoo.cfg lines (the keystore is written to ``data_dir`` by :meth:`write_keystore`)."""
        keystore = data_dir / KEYSTORE_NAME
        _check_path_for_properties(keystore)
        lines = [
            f"secureClientPort={self.secure_port}",
            f"secureClientPortAddress={host}",
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"ssl.keyStore.location={keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.clientAuth={CLIENT_AUTH[self.client_auth]}",
        ]
        if self.ca_file is not None:
            _check_path_for_properties(self.ca_file)
            lines += [f"ssl.trustStore.location={self.ca_file}", "ssl.trustStore.type=PEM"]
        return lines

    def write_keystore(self, data_dir: Path) -> Path:
        """Write key + certificate chain into one PEM file (mode 0600) in ``data_dir``."""
        try:
            key, cert = self.key_file.read_bytes(), self.cert_file.read_bytes()
        except OSError as exc:
            raise ZooKeeperError(f"cannot read the ZooKeeper TLS key or certificate: {exc}") from None
        if b"PRIVATE KEY" not in key or b"CERTIFICATE" not in cert:
            raise ZooKeeperError(f"{self.key_file} and {self.cert_file} must be a PEM key and a PEM certificate")
        path = data_dir / KEYSTORE_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key.rstrip(b"\n") + b"\n" + cert)
        return path


def _check_path_for_properties(path: Path) -> None:
    """zoo.cfg and log4j.properties are Java properties: no backslash, no newline."""
    text = str(path)
    if "\\" in text or "\n" in text or "\r" in text:
        raise ZooKeeperError(f"unusable ZooKeeper data dir {text!r}: pick a path without backslashes or newlines")


def render_zoo_cfg(
    data_dir: Path,
    port: int,
    host: str = "127.0.0.1",
    *,
    tick_ms: int = 500,
    max_session_timeout_ms: int = 60_000,
    force_sync: bool = True,
    tls: ServerTls | None = None,
    peers: Sequence[tuple[int, str]] = (),
) -> str:
    """The server's ``zoo.cfg``: standalone, or with ``peers`` a member of an ensemble.

    ``peers`` lists every member of the ensemble (this server included) as ``(myid,
    host)``; each gets a ``server.<myid>=<host>:2888:3888`` line (quorum and election
    ports: members run on hosts of their own, so the ports are ZooKeeper's defaults)
    and the ensemble's limits, ``initLimit`` 10 and ``syncLimit`` 5 ticks (5 s and
    2.5 s at the 500 ms tick: a member that lags its leader longer drops out of the
    quorum). Its ``myid`` file is the caller's (:class:`LocalZooKeeper` writes it).

    With ``tls``, the server also listens on ``tls.secure_port`` (TLS only), through
    the Netty connection factory (the NIO one cannot do TLS), with its key and
    certificate from one PEM file (``ssl.keyStore.type=PEM``, ZooKeeper 3.6+) and the
    CA it checks client certificates against (``ssl.clientAuth``); the plaintext
    ``clientPort`` stays for local tools and the four-letter words. ZooKeeper turns a
    key it does not know (``ssl.keyStore.location``) into the system property
    ``zookeeper.<key>``, which is where its X509 code reads them.

    Choices and why: a 500 ms tick lets clients ask for sessions as short as 1 s (the
    minimum is two ticks), so tests see a dead broker's ephemeral nodes vanish fast;
    the maximum session timeout is raised so clients may also ask for long ones. The
    admin HTTP server is off (it would take port 8080), only the four-letter words we
    use are allowed, connections per client IP are unlimited (every test process
    connects from 127.0.0.1), and transaction log files are preallocated in 4 MB
    instead of 64 MB steps. ``force_sync=False`` skips fsync: a killed server loses
    nothing (the page cache survives it), only a machine crash would.

    ``etc/zookeeper/zoo.cfg`` (the example for a real server) has the same settings but
    for the data dir, the tick and the ensemble-only limits; tests/unit/test_etc_configs.py
    compares the two, so a setting added here goes there too.
    """
    _check_path_for_properties(data_dir)
    if not 0 < port < 65536:
        raise ZooKeeperError(f"ZooKeeper client port {port} is out of range (1-65535)")
    lines = [
        "# Written by logferry (broker/testing/zkserver.py) on every start; edits are overwritten.",
        f"tickTime={tick_ms}",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        f"clientPortAddress={host}",
        f"maxSessionTimeout={max_session_timeout_ms}",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat",
        "preAllocSize=4096",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
        f"forceSync={'yes' if force_sync else 'no'}",
    ]
    if tls is not None:
        lines += tls.zoo_cfg_lines(data_dir, host)
    if peers:
        lines += ["initLimit=10", "syncLimit=5"]
        lines += [f"server.{myid}={peer}:2888:3888" for myid, peer in sorted(peers)]
    return "\n".join(lines) + "\n"


def render_log4j_properties(log_file: Path) -> str:
    """log4j 1.2 settings that write the server's log to ``log_file`` (10 MB x 3)."""
    _check_path_for_properties(log_file)
    lines = [
        "# Written by logferry (broker/testing/zkserver.py) on every start.",
        "log4j.rootLogger=INFO, FILE",
        "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
        f"log4j.appender.FILE.File={log_file}",
        "log4j.appender.FILE.Append=true",
        "log4j.appender.FILE.MaxFileSize=10MB",
        "log4j.appender.FILE.MaxBackupIndex=2",
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n",
    ]
    return "\n".join(lines) + "\n"


def read_cfg(path: Path) -> dict[str, str]:
    """Parse the ``key=value`` lines of a zoo.cfg (comments and blanks skipped)."""
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def parse_srvr(text: str) -> dict[str, str]:
    """Fields of a ``srvr`` reply: ``{"Mode": "standalone", "Connections": "3", ...}``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def four_letter_word(host: str, port: int, word: str, timeout: float = FOUR_LETTER_TIMEOUT) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ``stat``) and return the reply.

    The server closes the connection after answering, so read until EOF, bounded by
    ``timeout`` per socket operation and by reply size. Raises OSError when nobody
    answers.
    """
    chunks: list[bytes] = []
    size = 0
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        while size < _MAX_4LW_REPLY:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def port_is_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (bind test, as the JVM would bind).

    SO_REUSEADDR mirrors Java's server sockets, so connections left in TIME_WAIT by a
    previous server on the same port do not count as "in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a text file (reads at most ~1 MB from its end)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - min(size, max(4096, lines * 512), 1 << 20)))
            data = f.read()
    except FileNotFoundError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:] if lines > 0 else []


# ------------------------------------------------------------------- process handling


def _proc_state(pid: int) -> str | None:
    """One-letter state of ``pid`` from /proc (``"Z"`` for a zombie), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "?"
    # The command name is in parentheses and may contain spaces: split after it.
    return stat.rpartition(")")[2].split()[0]


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie; reaps it if it is our zombie child."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _proc_state(pid) in (None, "Z"):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # ours (a detached start in this process)? reap it
        return False
    return True


def _cmdline(pid: int) -> str | None:
    """The command line of ``pid`` (NUL-separated args joined by spaces), if readable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace")


class LocalZooKeeper:
    """One standalone ZooKeeper server on ``host:port`` keeping its state in ``data_dir``.

    ``start()`` spawns the JVM and waits until it serves; ``stop()`` (SIGTERM, then
    SIGKILL) and ``kill()`` (SIGKILL, a crash) end it and reap it; ``restart()`` keeps
    the data, so znodes and sessions survive as they would on a real server restart.
    ``start(detach=True)`` puts the server in its own session so it outlives this
    process; the pidfile lets a later ``LocalZooKeeper(...)`` on the same data dir
    (see :meth:`from_data_dir`) report on it and stop it.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        *,
        tick_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = True,
        heap_mb: int = 256,
        java_dir: Path = DEBIAN_JAVA_DIR,
        install: ZooKeeperInstall | None = None,
        tls: ServerTls | None = None,
        peers: Sequence[tuple[int, str]] = (),
        myid: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        if peers and (myid, host) not in peers:
            raise ZooKeeperError(f"an ensemble member's peers must include itself ({myid}, {host!r}): {list(peers)}")
        self.peers = tuple(peers)
        """Every member of its ensemble as (myid, host), itself included; () standalone."""
        self.myid = myid
        self.tls = tls
        """TLS on a secure port besides the plaintext one (None: plaintext only)."""
        self.port = port
        self.host = host
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.heap_mb = heap_mb
        self.java_dir = java_dir
        self._install = install
        self._proc: subprocess.Popen[bytes] | None = None
        self.last_start_seconds: float | None = None
        """How long the last :meth:`start` took until the server answered."""

    @classmethod
    def from_data_dir(cls, data_dir: Path, port: int | None = None) -> LocalZooKeeper:
        """A handle on the server of ``data_dir``, port read from its zoo.cfg if not given.

        Used by ``logferry zk stop|status`` to find a server started by another process.
        """
        data_dir = Path(data_dir)
        host = "127.0.0.1"
        cfg_path = data_dir / CONFIG_NAME
        if cfg_path.is_file():
            cfg = read_cfg(cfg_path)
            host = cfg.get("clientPortAddress", host)
            if port is None and cfg.get("clientPort", "").isdigit():
                port = int(cfg["clientPort"])
            if cfg.get("secureClientPort", "").isdigit():
                server = cls(data_dir, 2181 if port is None else port, host)
                server.secure_port_in_cfg = int(cfg["secureClientPort"])
                return server
        return cls(data_dir, 2181 if port is None else port, host)

    secure_port_in_cfg: int | None = None
    """The ``secureClientPort`` of the zoo.cfg a handle was made from (``zk status``)."""

    @property
    def secure_port(self) -> int | None:
        """The TLS port, when the server has one."""
        return self.tls.secure_port if self.tls is not None else self.secure_port_in_cfg

    @property
    def secure_hosts(self) -> str | None:
        """``host:secure_port`` (a connect string for TLS clients), or None."""
        port = self.secure_port
        return None if port is None else f"{self.host}:{port}"

    def __repr__(self) -> str:
        return f"LocalZooKeeper({str(self.data_dir)!r}, port={self.port}, pid={self.pid})"

    # -- paths and addresses

    @property
    def hosts(self) -> str:
        """``host:port``, the connect string without chroot."""
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_NAME

    @property
    def log_path(self) -> Path:
        """The server's own log (log4j)."""
        return self.data_dir / LOG_NAME

    @property
    def out_path(self) -> Path:
        """The JVM's stdout and stderr."""
        return self.data_dir / OUT_NAME

    @property
    def pid_path(self) -> Path:
        return self.data_dir / PID_NAME

    # -- state

    @property
    def pid(self) -> int | None:
        """Pid of this data dir's running server (ours or another process's), or None."""
        if self._proc is not None:
            if self._proc.poll() is None:
                return self._proc.pid
            self._proc = None
        pid = self._read_pidfile()
        if pid is None or not _pid_alive(pid):
            return None
        cmdline = _cmdline(pid)
        # A pid from an old pidfile may now belong to another program: check it is
        # a ZooKeeper started on this very zoo.cfg.
        if cmdline is not None and (MAIN_CLASS not in cmdline or str(self.config_path) not in cmdline):
            return None
        return pid

    def is_running(self) -> bool:
        """Whether the server process of this data dir is alive (serving or not)."""
        return self.pid is not None

    def four_letter_word(self, word: str, timeout: float = FOUR_LETTER_TIMEOUT) -> str:
        """Ask the server a four-letter word; raises OSError if it does not answer."""
        return four_letter_word(self.host, self.port, word, timeout)

    def srvr(self) -> dict[str, str]:
        """The server's ``srvr`` fields (Mode, Connections, Zookeeper version, ...)."""
        return parse_srvr(self.four_letter_word("srvr"))

    def is_serving(self) -> bool:
        """``ruok`` answers ``imok`` and ``srvr`` reports a mode.

        ``ruok`` alone is not enough: the server answers ``imok`` as soon as its port
        is open, while ``srvr`` still says "not currently serving requests".
        """
        try:
            return self.four_letter_word("ruok") == "imok" and "Mode" in self.srvr()
        except OSError:
            return False

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` of the server's log, plus the JVM's output if it wrote any."""
        parts = tail_lines(self.log_path, lines)
        out = tail_lines(self.out_path, lines)
        if out:
            parts += [f"--- {self.out_path.name} (JVM stdout/stderr) ---", *out]
        return "\n".join(parts) if parts else f"(no log yet in {self.data_dir})"

    # -- lifecycle

    def write_config(self) -> None:
        """Create the data dir and write zoo.cfg and log4j.properties into it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_zoo_cfg(
                self.data_dir,
                self.port,
                self.host,
                tick_ms=self.tick_ms,
                max_session_timeout_ms=self.max_session_timeout_ms,
                force_sync=self.force_sync,
                tls=self.tls,
                peers=self.peers,
            )
        )
        if self.peers:
            (self.data_dir / "myid").write_text(f"{self.myid}\n")
        if self.tls is not None:
            self.tls.write_keystore(self.data_dir)
        (self.data_dir / LOG4J_NAME).write_text(render_log4j_properties(self.log_path))

    def command(self, install: ZooKeeperInstall) -> list[str]:
        """The JVM command line (a small heap, C1 and the serial GC: a test server holds
        little and lives minutes, :mod:`broker.testing.jvm`)."""
        return [
            str(install.java),
            "-Xms16m",
            f"-Xmx{self.heap_mb}m",
            *QUICK_JVM_OPTIONS,
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configuration={(self.data_dir / LOG4J_NAME).as_uri()}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            self._classpath(install),
            MAIN_CLASS,
            str(self.config_path),
        ]

    def _classpath(self, install: ZooKeeperInstall) -> str:
        if self.tls is None:
            return install.classpath_arg
        missing = [j for j in NETTY_TLS_JARS if not (self.java_dir / j).is_file()]
        if missing:
            raise ZooKeeperNotInstalledError(
                f"Netty jars for ZooKeeper's TLS port missing from {self.java_dir}: "
                f"{', '.join(missing)}; {INSTALL_HINT}"
            )
        return os.pathsep.join([install.classpath_arg, *(str(self.java_dir / j) for j in NETTY_TLS_JARS)])

    def start(self, timeout: float = 30.0, *, detach: bool = False, wait: bool = True) -> None:
        """Start the server and return once it serves; on failure nothing is left running.

        ``detach=True`` starts it in a new session (no terminal signals, survives this
        process); the pidfile is written either way. ``wait=False`` returns once the
        JVM is spawned: an ensemble member serves only once a quorum of its peers runs,
        so an ensemble is started member by member, then waited for
        (:meth:`wait_ready`).
        """
        if self.is_running():
            raise ZooKeeperError(f"ZooKeeper already runs for {self.data_dir} (pid {self.pid}); stop it first")
        install = self._install or discover_install(self.java_dir)
        for port in (self.port, self.tls.secure_port if self.tls else None):
            if port is not None and not port_is_free(self.host, port):
                raise ZooKeeperStartError(f"port {port} on {self.host} is already in use; choose another port")
        self.write_config()
        began = time.monotonic()
        with self.out_path.open("ab") as out:
            self._proc = subprocess.Popen(
                self.command(install),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,  # a JVM crash report (hs_err_pid*.log) lands here
                start_new_session=detach,
            )
        self._write_pidfile(self._proc.pid)
        if not wait:
            return
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        self.last_start_seconds = time.monotonic() - began

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the server serves (see :meth:`is_serving`), at most ``timeout`` s.

        Fails fast, with the log tail, if the process exits meanwhile (port taken,
        bad config, missing class).
        """
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / POLL_INTERVAL) + 2):
            if self._proc is not None and self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                self._remove_pidfile()
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with code {code} while starting on {self.hosts}",
                    self.log_path,
                    self.log_tail(40),
                )
            if self._proc is None and not self.is_running():
                raise ZooKeeperStartError(
                    f"ZooKeeper for {self.data_dir} is not running", self.log_path, self.log_tail(40)
                )
            if self.is_serving():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(POLL_INTERVAL, remaining))
        raise ZooKeeperStartError(
            f"ZooKeeper on {self.hosts} did not serve within {timeout:g}s",
            self.log_path,
            self.log_tail(40),
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns once it is gone."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL, like a crash or ``kill -9``: no clean shutdown."""
        self._end(signal.SIGKILL, KILL_WAIT)

    def restart(self, timeout: float = 30.0) -> None:
        """Stop (if running) and start again on the same port with the same data."""
        self.stop()
        self.start(timeout)

    def __enter__(self) -> LocalZooKeeper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        """Send ``sig``; after ``timeout`` escalate to SIGKILL; always reap; drop pidfile."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(sig)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    try:
                        proc.wait(KILL_WAIT)
                    except subprocess.TimeoutExpired:
                        raise ZooKeeperError(
                            f"ZooKeeper pid {proc.pid} survived SIGKILL for {KILL_WAIT:.0f}s"
                        ) from None
        else:
            pid = self.pid
            if pid is not None:
                self._signal_and_wait(pid, sig, timeout)
        self._remove_pidfile()

    def _signal_and_wait(self, pid: int, sig: signal.Signals, timeout: float) -> None:
        """End a server we did not spawn (found via the pidfile): poll until it is gone."""
        for current, wait in ((sig, timeout), (signal.SIGKILL, KILL_WAIT)):
            try:
                os.kill(pid, current)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            for _ in range(int(wait / POLL_INTERVAL) + 2):
                if not _pid_alive(pid):
                    return
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_INTERVAL)
        raise ZooKeeperError(f"ZooKeeper pid {pid} survived SIGKILL for {KILL_WAIT:.0f}s")

    def _read_pidfile(self) -> int | None:
        try:
            text = self.pid_path.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return int(text) if text.isdigit() else None

    def _write_pidfile(self, pid: int) -> None:
        tmp = self.pid_path.with_suffix(".pid.tmp")
        tmp.write_text(f"{pid}\n")
        tmp.replace(self.pid_path)  # atomic: a reader never sees a half-written pid

    def _remove_pidfile(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()


__all__ = [
    "APT_COMMAND",
    "INSTALL_HINT",
    "LocalZooKeeper",
    "ServerTls",
    "ZooKeeperInstall",
    "ZooKeeperNotInstalledError",
    "ZooKeeperStartError",
    "discover_install",
    "find_classpath",
    "find_java",
    "four_letter_word",
    "parse_java_major",
    "parse_srvr",
    "port_is_free",
    "read_cfg",
    "render_log4j_properties",
    "render_zoo_cfg",
    "tail_lines",
]
