"""``logferry zk start|stop|status``: a local ZooKeeper for development and the demo.

Runs Debian's ZooKeeper (see :mod:`broker.testing.zkserver`) in the background with its
state, log and pidfile in one data dir, so ``stop`` and ``status`` find it from
another shell later. ``start --ensemble 3`` (or 5) runs an ensemble instead: member N
on loopback address ``127.0.0.N`` (the client port and ZooKeeper's quorum and election
ports 2888 and 3888 on each), in ``<data dir>/member-N``; ``stop`` and ``status`` find
the members there. A real quorum, to try what a production ensemble does when a member
goes (``logferry zk status`` shows who leads) on one machine.

Exit codes: 0 done, 1 failure (including Java or ZooKeeper not installed: the message
says what to run), 2 user mistake (bad option, port taken), and for ``status`` 3 when
it is not running (the LSB convention for service status).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from broker.common.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, report
from broker.common.errors import ConfigError, ZooKeeperError
from broker.testing.zkserver import (
    LocalZooKeeper,
    ServerTls,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
)

DEFAULT_SECURE_PORT = 2281

DEFAULT_PORT = 2181
DEFAULT_DATA_DIR = Path(".logferry/zookeeper")

EXIT_FAILED = EXIT_FAILURE
EXIT_NOT_RUNNING = 3
"""``zk status`` when ZooKeeper is not running (the LSB convention for service status)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``zk`` and its ``start``, ``stop`` and ``status`` actions.

    Each action's handler is stored as ``func`` (takes the Namespace, returns the
    exit code), as ``broker.cli.main`` dispatches.
    """
    zk = subparsers.add_parser(
        "zk",
        help="run a local ZooKeeper (Debian's package) in the background",
        description="Start, stop or inspect a local ZooKeeper kept in a data dir.",
    )
    actions = zk.add_subparsers(dest="zk_command", metavar="ACTION")
    actions.required = True
    specs: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("start", "start ZooKeeper in the background (no-op if it runs)", cmd_start),
        ("stop", "stop the ZooKeeper of the data dir (no-op if stopped)", cmd_stop),
        ("status", "tell whether it runs: pid, port, mode, connections", cmd_status),
    ]
    for name, helptext, handler in specs:
        action = actions.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        action.add_argument(
            "--port",
            type=_port,
            default=None,
            help=f"client port on 127.0.0.1 (default: the port in the data dir's zoo.cfg, else {DEFAULT_PORT})",
        )
        action.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"where its state, log and pidfile live (default: ./{DEFAULT_DATA_DIR})",
        )
        if name == "start":
            action.add_argument(
                "--timeout", type=float, default=30.0, help="seconds to wait until it serves (default: 30)"
            )
            action.add_argument(
                "--ensemble",
                type=_ensemble_size,
                default=1,
                metavar="N",
                help="run an ensemble of N members (3 or 5) on 127.0.0.1 ... 127.0.0.N, "
                "in DATA_DIR/member-<n> (default: 1, a standalone server)",
            )
            _add_tls_args(action)
        action.set_defaults(func=handler)
    from broker.cli import zk_secure_cmd

    zk_secure_cmd.add_actions(actions)
    return zk


def _add_tls_args(action: argparse.ArgumentParser) -> None:
    group = action.add_argument_group("TLS (docs/security.md, 'ZooKeeper')")
    group.add_argument(
        "--tls",
        action="store_true",
        help="also listen with TLS on --secure-port (Netty); without --tls-cert "
        "a CA and a certificate for 127.0.0.1 are made in DATA_DIR/tls",
    )
    group.add_argument(
        "--secure-port",
        type=_port,
        default=None,
        help=f"the TLS port (secureClientPort; default {DEFAULT_SECURE_PORT})",
    )
    group.add_argument("--tls-cert", type=Path, metavar="FILE", help="the server's certificate (PEM)")
    group.add_argument("--tls-key", type=Path, metavar="FILE", help="its key (PEM, unencrypted)")
    group.add_argument("--tls-ca", type=Path, metavar="FILE", help="CA that client certificates are checked against")
    group.add_argument(
        "--tls-client-auth",
        choices=("none", "optional", "required"),
        default="none",
        help="ask clients for a certificate (default: none)",
    )


def _server_tls(args: argparse.Namespace) -> ServerTls | None:
    """The TLS settings the options ask for (a CA and certificate made when none is given)."""
    if not (args.tls or args.tls_cert or args.tls_key or args.secure_port):
        return None
    cert, key, ca = args.tls_cert, args.tls_key, args.tls_ca
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if cert is None:
        cert, key, made_ca = _make_server_cert(args.data_dir / "tls", args.port or DEFAULT_PORT)
        ca = ca or made_ca
    try:
        return ServerTls(
            args.secure_port or DEFAULT_SECURE_PORT,
            Path(cert).resolve(),
            Path(key).resolve(),
            Path(ca).resolve() if ca else None,
            args.tls_client_auth,
        )
    except ZooKeeperError as exc:
        raise ConfigError(str(exc)) from None


def _make_server_cert(directory: Path, port: int) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate for 127.0.0.1/localhost, kept across starts."""
    cert, key, ca = directory / "zookeeper.pem", directory / "zookeeper.key", directory / "ca.pem"
    if cert.is_file() and key.is_file() and ca.is_file():
        return cert, key, ca
    try:
        from broker.common import certs
    except ImportError:
        raise ConfigError(
            "--tls without --tls-cert makes a certificate, which needs the "
            "'certs' extra (pip install 'logferry[certs]')"
        ) from None
    made = certs.make_ca("logferry local ZooKeeper CA")
    issued = certs.issue(made.cert_pem, made.key_pem, "zookeeper", ["127.0.0.1", "localhost"])
    directory.mkdir(parents=True, exist_ok=True)
    ca.write_bytes(made.cert_pem)
    cert.write_bytes(issued.cert_pem)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(issued.key_pem)
    return cert, key, ca


def _port(text: str) -> int:
    """argparse type: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (1-65535)")
    return port


def _ensemble_size(text: str) -> int:
    """argparse type: 1 (standalone), or an ensemble of 3 or 5 members."""
    if text not in ("1", "3", "5"):
        raise argparse.ArgumentTypeError(f"an ensemble has 3 or 5 members (or 1: standalone), not {text!r}")
    return int(text)


def member_dir(data_dir: Path, myid: int) -> Path:
    """Where member ``myid`` of an ensemble keeps its state, log and pidfile."""
    return data_dir / f"member-{myid}"


def ensemble_members(data_dir: Path, size: int, port: int) -> list[LocalZooKeeper]:
    """The members of an ensemble of ``size`` on loopback: member N on ``127.0.0.N:port``."""
    peers = [(n, f"127.0.0.{n}") for n in range(1, size + 1)]
    return [LocalZooKeeper(member_dir(data_dir, n), port, host, peers=peers, myid=n) for n, host in peers]


def _found_members(data_dir: Path, port: int | None) -> list[LocalZooKeeper]:
    """The members of an ensemble started in ``data_dir`` before ([]: none there)."""
    dirs = sorted(data_dir.glob("member-*"), key=lambda d: d.name)
    return [LocalZooKeeper.from_data_dir(d, port) for d in dirs if (d / "zoo.cfg").is_file()]


def _error(action: str, message: str) -> None:
    """One line on stderr, no traceback (the format of every logferry command)."""
    report(f"zk {action}", message)


def cmd_start(args: argparse.Namespace) -> int:
    """Start ZooKeeper detached; report where it runs."""
    data_dir: Path = args.data_dir
    if getattr(args, "ensemble", 1) > 1:
        return _start_ensemble(args)
    existing = LocalZooKeeper.from_data_dir(data_dir)
    pid = existing.pid
    if pid is not None:
        print(f"ZooKeeper already running: pid {pid}, {existing.hosts}, data dir {existing.data_dir}")
        if args.port is not None and args.port != existing.port:
            _error(
                "start",
                f"it listens on port {existing.port}, not {args.port}; "
                f"run `logferry zk stop --data-dir {data_dir}` first to change the port",
            )
            return EXIT_USAGE
        return EXIT_OK
    # Without --port, a data dir started before keeps its port (from its zoo.cfg).
    server = LocalZooKeeper(data_dir, args.port or existing.port, tls=_server_tls(args))
    try:
        server.start(args.timeout, detach=True)
    except ZooKeeperNotInstalledError as exc:
        _error("start", str(exc))
        return EXIT_FAILED
    except ZooKeeperStartError as exc:
        _error("start", f"{exc.summary}; see {exc.log_path or server.log_path}")
        return EXIT_USAGE if "already in use" in exc.summary else EXIT_FAILED
    except (ZooKeeperError, OSError) as exc:
        _error("start", str(exc).splitlines()[0])
        return EXIT_FAILED
    print(f"ZooKeeper started: pid {server.pid}, {server.hosts}, data dir {server.data_dir}, log {server.log_path}")
    if server.tls is not None:
        ca = f", CA {server.tls.ca_file}" if server.tls.ca_file else ""
        print(f"TLS: {server.secure_hosts} (connect with --zk-tls-ca or [zookeeper.tls]{ca})")
    return EXIT_OK


def _start_ensemble(args: argparse.Namespace) -> int:
    """Start the members detached, all before waiting (none serves before a quorum runs)."""
    if _server_tls(args) is not None:
        _error("start", "--tls is for a standalone server; start the ensemble without it")
        return EXIT_USAGE
    members = ensemble_members(args.data_dir, args.ensemble, args.port or DEFAULT_PORT)
    connect = ",".join(m.hosts for m in members)
    running = [m for m in members if m.pid is not None]
    if len(running) == len(members):
        print(f"ZooKeeper ensemble already running: {connect}, data dir {args.data_dir}")
        return EXIT_OK
    started: list[LocalZooKeeper] = []
    try:
        for member in members:
            if member.pid is None:
                member.start(args.timeout, detach=True, wait=False)
                started.append(member)
        for member in members:
            member.wait_ready(args.timeout)
    except ZooKeeperNotInstalledError as exc:
        _error("start", str(exc))
        return EXIT_FAILED
    except (ZooKeeperError, OSError) as exc:
        for member in started:
            member.stop()
        if isinstance(exc, ZooKeeperStartError):
            _error("start", f"{exc.summary}; see {exc.log_path}")
            return EXIT_USAGE if "already in use" in exc.summary else EXIT_FAILED
        _error("start", str(exc).splitlines()[0])
        return EXIT_FAILED
    modes = ", ".join(f"{m.host} {m.srvr().get('Mode', '?')} (pid {m.pid})" for m in members)
    print(f"ZooKeeper ensemble of {len(members)} started: {modes}; data dir {args.data_dir}")
    print(f"connect string: {connect}")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop the data dir's ZooKeeper (SIGTERM, then SIGKILL after 10 s)."""
    members = _found_members(args.data_dir, args.port)
    if members:
        failed = False
        for member in members:
            pid = member.pid
            try:
                member.stop()
            except (ZooKeeperError, OSError) as exc:
                _error("stop", f"member {member.hosts}: {exc}")
                failed = True
                continue
            print(f"ZooKeeper member {member.hosts} " + ("stopped" if pid is not None else "was not running"))
        return EXIT_FAILED if failed else EXIT_OK
    server = LocalZooKeeper.from_data_dir(args.data_dir, args.port)
    pid = server.pid
    if pid is None:
        print(f"ZooKeeper is not running (data dir {server.data_dir})")
        return EXIT_OK
    try:
        server.stop()
    except (ZooKeeperError, OSError) as exc:
        _error("stop", str(exc))
        return EXIT_FAILED
    print(f"ZooKeeper stopped (pid {pid})")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print whether it runs, its pid, port, and what ``srvr`` says (mode, connections)."""
    members = _found_members(args.data_dir, args.port)
    if members:
        return _ensemble_status(members)
    server = LocalZooKeeper.from_data_dir(args.data_dir, args.port)
    pid = server.pid
    if pid is None:
        print(f"ZooKeeper: not running (data dir {server.data_dir})")
        return EXIT_NOT_RUNNING
    print("ZooKeeper: running")
    print(f"  pid: {pid}")
    print(f"  address: {server.hosts}")
    if server.secure_hosts is not None:
        print(f"  TLS address: {server.secure_hosts}")
    print(f"  data dir: {server.data_dir}")
    print(f"  log: {server.log_path}")
    try:
        fields = server.srvr()
    except OSError as exc:
        print(f"  mode: unknown (no answer to srvr on {server.hosts}: {exc})")
        _error("status", f"ZooKeeper (pid {pid}) does not answer on {server.hosts}: {exc}")
        return EXIT_FAILED
    if "Mode" not in fields:
        print("  mode: not serving yet")
        _error("status", f"ZooKeeper (pid {pid}) is not serving yet on {server.hosts}")
        return EXIT_FAILED
    print(f"  mode: {fields['Mode']}")
    print(f"  connections: {fields.get('Connections', '?')}")
    print(f"  znodes: {fields.get('Node count', '?')}")
    print(f"  version: {fields.get('Zookeeper version', '?').split(',')[0].split('-')[0]}")
    return EXIT_OK


def _ensemble_status(members: list[LocalZooKeeper]) -> int:
    """One line per member; 0 when every member serves, 3 when none runs, else 1."""
    print(f"ZooKeeper ensemble of {len(members)}: {','.join(m.hosts for m in members)}")
    serving = running = 0
    for member in members:
        pid = member.pid
        if pid is None:
            print(f"  {member.hosts}: not running")
            continue
        running += 1
        try:
            mode = member.srvr().get("Mode", "not serving")
        except OSError as exc:
            mode = f"no answer ({exc})"
        serving += mode in ("leader", "follower", "observer")
        print(f"  {member.hosts}: pid {pid}, {mode}")
    if running == 0:
        return EXIT_NOT_RUNNING
    if serving < len(members):
        quorum = "a quorum serves" if serving > len(members) // 2 else "no quorum"
        _error("status", f"{serving} of {len(members)} members serve ({quorum})")
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m broker.cli.zk_cmd ACTION ...``: the zk command on its own."""
    parser = argparse.ArgumentParser(prog="logferry")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["zk", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
