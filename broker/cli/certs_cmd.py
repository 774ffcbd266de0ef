"""``logferry certs``: a private CA and certificates for a test or demo deployment.

- ``logferry certs ca --out DIR`` writes ``DIR/ca.pem`` (the CA certificate, give it to
  every broker and client as ``ca_file``) and ``DIR/ca.key`` (its key, 0600: keep it
  off the brokers);
- ``logferry certs issue --ca DIR --name broker-1 --host 127.0.0.1 --host localhost
  --out DIR`` writes ``DIR/broker-1.pem`` and ``DIR/broker-1.key`` (0600), signed by the
  CA in ``--ca``, valid for TLS servers and clients, with each ``--host`` as a subject
  alternative name.

Existing files are never overwritten without ``--force`` (a CA key replaced by mistake
orphans every certificate it signed). Exit 2 for a usage mistake (a bad name or host,
a CA directory without a CA, a file in the way), 1 when writing fails.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from broker.common.errors import ConfigError, LogferryError

CA_CERT = "ca.pem"
CA_KEY = "ca.key"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``certs ca`` and ``certs issue``."""
    p = sub.add_parser(
        "certs",
        help="create a private CA and issue TLS certificates",
        description="Create a private CA and issue broker and client "
        "certificates for a test or demo deployment "
        "(docs/security.md: using a real CA instead).",
    )
    csub = p.add_subparsers(dest="certs_command", metavar="ACTION")
    csub.required = True

    ca = csub.add_parser("ca", help="create a private CA (ca.pem, ca.key)")
    ca.add_argument("--out", required=True, type=Path, help="directory to write ca.pem and ca.key")
    ca.add_argument("--common-name", default="logferry private CA", help="the CA's subject CN")
    ca.add_argument("--days", type=int, default=None, help="validity in days (default: about 10 years)")
    ca.add_argument("--force", action="store_true", help="overwrite existing files")
    ca.set_defaults(func=ca_cmd, long_running=False)

    issue = csub.add_parser("issue", help="issue a certificate signed by the CA")
    issue.add_argument("--ca", required=True, type=Path, help="the directory `certs ca` wrote (ca.pem, ca.key)")
    issue.add_argument("--name", required=True, help="the certificate's name (subject CN and file name), e.g. broker-1")
    issue.add_argument(
        "--host",
        action="append",
        default=[],
        help="a host name or IP address clients dial (repeat for each); a client-only certificate needs none",
    )
    issue.add_argument("--out", required=True, type=Path, help="directory to write NAME.pem and NAME.key")
    issue.add_argument("--days", type=int, default=None, help="validity in days (default: 825, at most the CA's)")
    issue.add_argument("--force", action="store_true", help="overwrite existing files")
    issue.set_defaults(func=issue_cmd, long_running=False)


def _certs() -> Any:
    """:mod:`broker.common.certs`, which needs the optional ``cryptography`` package."""
    try:
        from broker.common import certs
    except ImportError:
        raise LogferryError("certs needs the cryptography package: pip install 'logferry[certs]'") from None
    return certs


def ca_cmd(args: argparse.Namespace) -> int:
    certs = _certs()
    made = certs.make_ca(args.common_name, certs.CA_DAYS if args.days is None else args.days)
    cert_path, key_path = args.out / CA_CERT, args.out / CA_KEY
    _check_free((cert_path, key_path), args.force)
    write_files(args.out, {CA_KEY: (made.key_pem, 0o600), CA_CERT: (made.cert_pem, 0o644)}, args.force)
    print(
        f"wrote {cert_path} (give it to brokers and clients as ca_file) and {key_path} (keep it private)",
        file=sys.stderr,
    )
    return 0


def issue_cmd(args: argparse.Namespace) -> int:
    certs = _certs()
    name = certs.check_name(args.name)
    certs.alt_names(args.host)  # a bad --host is a usage error before reading anything
    cert_path, key_path = args.out / f"{name}.pem", args.out / f"{name}.key"
    _check_free((cert_path, key_path), args.force)
    ca_pem, ca_key = _read_ca(args.ca)
    made = certs.issue(ca_pem, ca_key, name, args.host, certs.CERT_DAYS if args.days is None else args.days)
    write_files(args.out, {f"{name}.key": (made.key_pem, 0o600), f"{name}.pem": (made.cert_pem, 0o644)}, args.force)
    hosts = ", ".join(args.host) if args.host else "no host names (a client certificate)"
    print(f"wrote {cert_path} and {key_path} for {name} ({hosts})", file=sys.stderr)
    return 0


def _read_ca(directory: Path) -> tuple[bytes, bytes]:
    found = []
    for file in (CA_CERT, CA_KEY):
        path = directory / file
        try:
            found.append(path.read_bytes())
        except FileNotFoundError:
            raise ConfigError(
                f"--ca {directory}: no {file} there; create a CA with `logferry certs ca --out {directory}`"
            ) from None
        except OSError as exc:
            raise ConfigError(f"--ca {directory}: cannot read {file}: {exc.strerror}") from None
    _certs().load_ca(found[0], found[1])  # a clear error if these are not a CA
    return found[0], found[1]


def _check_free(paths: tuple[Path, ...], force: bool) -> None:
    if force:
        return
    for path in paths:
        if path.exists():
            raise ConfigError(f"{path} exists; pass --force to overwrite it")


def write_files(directory: Path, files: dict[str, tuple[bytes, int]], force: bool) -> None:
    """Write each file with its mode set at creation (a key is never readable by others,
    not even for a moment). Raises OSError (exit 1) when the directory is not writable."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (data, mode) in files.items():
        path = directory / name
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
        fd = os.open(path, flags, mode)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, mode)  # an existing file overwritten with --force keeps no old mode
            handle.write(data)


__all__ = ["CA_CERT", "CA_KEY", "add_parser", "ca_cmd", "issue_cmd", "write_files"]
