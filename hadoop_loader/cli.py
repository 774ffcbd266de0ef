"""``logferry load --config etc/loader.toml``: the nightly landing job.

Registered in the ``logferry`` command through the entry point group
``logferry.commands`` (``load = "hadoop_loader.cli:register"``); also runnable alone
as ``python -m hadoop_loader load ...``. Exit codes and the error line follow every
logferry command (broker.common.commands): 0 success, 1 failure, 2 a config or usage
mistake, 130 after Ctrl-C, and 3 when the audit found an hour below
``--require-complete``; errors print ``logferry load: error: <message>``. A run that
found landed files missing or damaged (and did not repair them all) lands what is new,
prints the summary and exits 1 naming the damage (exit 1 outranks 3: the audit's counts
are short because of it).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.common.commands import EXIT_INTERRUPTED, report, setup_logging
from hadoop_loader.errors import LoaderError

if TYPE_CHECKING:
    from hadoop_loader.config import LoaderConfig

log = logging.getLogger("logferry.loader")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``load`` command to the ``logferry`` command line."""
    parser = subparsers.add_parser(
        "load",
        help="land topics into Parquet (exactly once), then audit",
        description="Land the configured topics from the brokers into Parquet files "
        "partitioned by topic and event hour, exactly once, and compare the "
        "landed counts with the audit topic.",
    )
    parser.add_argument("--config", required=True, help="loader TOML file (etc/loader.toml)")
    parser.add_argument("--master", help="Spark master URL (default: local[*], or spark-submit's)")
    parser.add_argument(
        "--require-complete",
        type=_fraction,
        metavar="FRACTION",
        help="exit 3 if a settled audited hour is below this completeness (e.g. 0.999); implies the audit",
    )
    parser.add_argument("--no-audit", action="store_true", help="skip the audit this run")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="land files the verification finds missing or damaged again "
        "from the cluster (while it still holds their offsets), then the run",
    )
    parser.add_argument(
        "--maintain",
        action="store_true",
        help="instead of a load: compact each hour's files, expire old snapshots and remove "
        "orphan files in the topics' Iceberg tables ([maintenance] in the config)",
    )
    parser.add_argument(
        "--every",
        type=_interval,
        metavar="INTERVAL",
        help="run again and again, one run every INTERVAL (30s, 5m, 1h) in one process, "
        "one line per run, until SIGTERM or Ctrl-C (a run in flight finishes first); no audit",
    )
    parser.set_defaults(func=run)


def _interval(text: str) -> float:
    from hadoop_loader.continuous import parse_interval

    try:
        return parse_interval(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Handler of ``logferry load``; returns the exit code."""
    from dataclasses import replace

    from hadoop_loader.audit import require_complete
    from hadoop_loader.config import load_config
    from hadoop_loader.job import run_load, run_maintenance
    from hadoop_loader.summary import print_audit, print_maintenance, print_summary

    try:
        config = load_config(args.config)
        if getattr(args, "every", None) is not None:
            return _run_every(config, args)
        if getattr(args, "maintain", False):
            print_maintenance(run_maintenance(config, master=args.master), sys.stdout)
            sys.stdout.flush()
            return 0
        audit = config.audit
        if args.require_complete is not None:
            audit = replace(audit, enabled=True, require_complete=args.require_complete)
        if args.no_audit:
            audit = replace(audit, enabled=False)
        config = replace(config, audit=audit)
        result = run_load(config, master=args.master, repair=args.repair)
        print_summary(result, sys.stdout)
        if result.audit_error is not None:
            sys.stdout.flush()
            return report("load", f"audit failed: {result.audit_error}", result.audit_error.exit_code)
        if result.audit is not None:
            print_audit(result.audit, sys.stdout)
        sys.stdout.flush()
        lake_problem(result)
        if result.audit is not None and audit.require_complete is not None:
            require_complete(result.audit, audit.require_complete)
        return 0
    except LoaderError as exc:
        return report("load", exc, exc.exit_code)


def _run_every(config: LoaderConfig, args: argparse.Namespace) -> int:
    """``--every``: the loop of :mod:`hadoop_loader.continuous`, one line per run."""
    import signal

    from hadoop_loader.config import config_error
    from hadoop_loader.continuous import Outcome, StopFlag, describe, run_every

    if args.repair or args.maintain or args.require_complete is not None:
        raise config_error("--every", "runs loads only: without --repair, --maintain or --require-complete")

    def report_run(outcome: Outcome) -> None:
        print(describe(outcome), flush=True)

    stop = StopFlag()
    restore = stop.install()
    try:
        code = run_every(config, args.every, stop, report_run, master=args.master)
    except LoaderError:
        raise
    except Exception as exc:  # not the loader's (e.g. its JVM died): one line, and systemd restarts it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return report("load", f"the load loop stopped: {type(exc).__name__}: {first}")
    finally:
        restore()
    log.info("load loop stopped%s", " after the run in flight" if stop.during_run else "")
    return EXIT_INTERRUPTED if code == 0 and signal.SIGINT in stop.signals else code


def lake_problem(result: object) -> None:
    """Raise :class:`LakeDamagedError` when damaged files are left after the run."""
    from hadoop_loader.errors import LakeDamagedError

    lake = getattr(result, "lake", None)
    if lake is None or not lake.damaged:
        return
    repair = getattr(result, "repair", None)
    left = [
        d
        for d in lake.damaged
        if repair is None or not any(g.origin == d.origin and g.directory == d.directory for g in repair.repaired)
    ]
    if not left:
        return
    hint = (
        "; they cannot be repaired (see above)" if repair is not None else "; `logferry load --repair` lands them again"
    )
    raise LakeDamagedError(f"{len(left)} landed file(s) missing or damaged, first {left[0].describe()}{hint}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hadoop_loader load ...`` without the ``logferry`` entry point."""
    parser = argparse.ArgumentParser(prog="python -m hadoop_loader")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    setup_logging(args.verbose, long_running=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
