"""The demo's orchestration: start the deployment, feed it, drain it, count it, stop it.

Order of events (every wait bounded)::

    HDFS starts in the background (--lake hdfs, the default; demo.lake)
    ZooKeeper ─► live brokers (etc/live) + analysis brokers (etc/analysis)
      ─► topics in the live cluster ─► mirror (etc/mirror.toml) ─► dashboard group
      ─► one agent per host (etc/agent.toml) ─► hosts write and rotate for --seconds
      ─► drain: live cluster holds every record, then the agents stop (final audit)
      ─► analysis cluster holds everything, audit topic included
      ─► HDFS takes writes ─► loader (etc/loader.toml) lands an Iceberg table per topic
         into it (or Parquet under the workdir, --lake file) ─► report ─► stop everything

The pipeline is stopped front to back: agents, mirror, brokers, ZooKeeper, HDFS. With
``--keep-running``, :mod:`demo.keep` first sets it flowing again until Ctrl-C. Brokers,
agents and the mirror serve their metrics on free ports of 127.0.0.1 (printed).
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from broker.common.errors import ConfigError, LogferryError
from broker.testing.hdfs import LocalHdfs
from broker.testing.iceberg_jars import JARS as ICEBERG_JARS
from broker.testing.iceberg_jars import runtime_jar
from demo import configs
from demo.console_check import console_landed, console_status
from demo.counting import ClusterCounter, audit_sums, parquet_rows
from demo.dashboard import GROUP, Dashboard
from demo.hosts import WebHost, app_vocabulary, check_multiline, sources_from_agent_config
from demo.keep import keep_running
from demo.lake import missing as lake_missing
from demo.pipeline import Pipeline, read_status, say
from demo.processes import Child, DemoError
from demo.query import iceberg_where, parquet_where, write_iceberg_query, write_parquet_query
from demo.report import Tally, problems, render

MARKER = ".logferry-demo"
PROGRESS_S = 2.0


def _prepare_workdir(workdir: Path) -> None:
    """Start from an empty workdir; refuse to wipe a directory the demo did not make."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / MARKER).exists():
            raise ConfigError(f"{workdir} is not empty and was not made by the demo; choose another --workdir")
        hdfs = LocalHdfs.from_data_dir(workdir / "hdfs")
        if hdfs.is_running():
            raise ConfigError(
                f"a demo still runs in {workdir} (HDFS: {hdfs.pids()}); stop it (Ctrl-C in its terminal) first, "
                f"or, if that demo is gone, its HDFS: logferry hdfs stop --data-dir {hdfs.data_dir}"
            )
        zk_dir = workdir / "zookeeper"  # one server's pidfile, or each ensemble member's
        for pidfile in [zk_dir / "zookeeper.pid", *sorted(zk_dir.glob("member-*/zookeeper.pid"))]:
            if pidfile.exists():
                try:
                    pid = int(pidfile.read_text().strip())
                    import os

                    os.kill(pid, 0)
                    raise ConfigError(
                        f"a demo still runs in {workdir} (ZooKeeper pid {pid}); stop it (Ctrl-C in its terminal) first"
                    )
                except (ValueError, ProcessLookupError, PermissionError):
                    pass
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by `logferry demo`; wiped by its next run\n")


def _wait_counts(
    counter: ClusterCounter, want: dict[str, int], timeout: float, extra: dict[str, int] | None = None
) -> bool:
    """Poll a cluster until it holds at least ``want`` per topic (and ``extra``)."""
    deadline = time.monotonic() + timeout
    goal = {**want, **(extra or {})}
    while True:
        counts = counter.update()
        if all(counts.get(t, 0) >= n for t, n in goal.items()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _settled(counter: ClusterCounter, topic: str, quiet_s: float = 1.5, timeout: float = 20.0) -> int:
    """The count of ``topic`` once it stopped changing for ``quiet_s`` (acked is not yet
    visible: consumers see what the broker flushed, after its flush_ms)."""
    deadline = time.monotonic() + timeout
    value = counter.update()[topic]
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = counter.update()[topic]
        if again == value:
            break
        value = again
    return value


def _fmt_rates(rates: dict[str, float]) -> str:
    return ", ".join(f"{t} {r:,.0f}/s" for t, r in rates.items())


def run(args: argparse.Namespace) -> int:
    """``logferry demo``; returns the exit code."""
    if args.seconds <= 0 or args.rate <= 0 or args.hosts < 1 or args.keep_rate <= 0:
        raise ConfigError("--seconds, --rate, --hosts and --keep-rate must be positive")
    started = time.monotonic()
    workdir = Path(args.workdir).resolve()
    _prepare_workdir(workdir)
    reason = lake_missing(getattr(args, "lake", "hdfs"))
    if reason:  # before starting anything
        raise DemoError(reason)
    pipeline = Pipeline(args, workdir)
    if not pipeline.topics:
        raise ConfigError("etc/agent.toml has no [[sources]]: nothing to publish")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    logging.getLogger("logferry.group").setLevel(logging.WARNING)  # the dashboard's joins/leaves
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    stop_hosts = threading.Event()
    code = 1
    try:
        code = _run(args, workdir, pipeline, stop_hosts)
    except KeyboardInterrupt:
        print(flush=True)
        say("interrupted: stopping everything")
        code = 130
    except LogferryError as exc:
        say(f"FAILED: {exc}")
        code = 1
    finally:
        stop_hosts.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup must not be cut short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if pipeline.dashboard is not None and pipeline.dashboard.is_alive():
                pipeline.dashboard.stop(10.0)
            issues = pipeline.sup.stop_all() + pipeline.stop_lake()
            for issue in issues:
                say(f"while stopping: {issue}")
            say("stopped every process it started")
            mode = "secured: TLS+SCRAM, ACLs" if pipeline.security is not None else "plaintext, no authentication"
            say(f"ran in {time.monotonic() - started:.1f}s ({mode})")
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
    return code


def _run(args: argparse.Namespace, workdir: Path, pipeline: Pipeline, stop_hosts: threading.Event) -> int:
    hosts = [f"web-{i + 1}" for i in range(args.hosts)]
    specs = sources_from_agent_config(pipeline.agent_doc)
    vocabulary = app_vocabulary()
    rotate_s = args.rotate_every or max(args.seconds / 3, 2.0)
    writers = [
        WebHost(
            h,
            workdir / "hosts" / h,
            specs,
            args.rate / len(hosts),
            args.seconds,
            rotate_s,
            stop_hosts,
            seed=i + 1,
            vocabulary=vocabulary,
        )
        for i, h in enumerate(hosts)
    ]
    check_multiline(pipeline.agent_doc, writers[0])
    say(
        f"plan: {len(hosts)} hosts x {args.rate / len(hosts):,.0f} records/s for "
        f"{args.seconds:.0f}s, rotating every {rotate_s:.0f}s; workdir {workdir}"
    )

    pipeline.start_lake()
    pipeline.start_clusters()
    pipeline.check_lake()
    pipeline.create_topics()
    pipeline.start_mirror()
    pipeline.start_console()
    pipeline.check_lake()
    dashboard = pipeline.dashboard = Dashboard(
        pipeline.zk_as("dashboard", "live"), pipeline.topics, pipeline.client("dashboard", "live")
    )
    dashboard.start()
    dashboard.ready.wait(30)
    say(f"dashboard: consumer group '{GROUP}' on the live cluster")
    for writer in writers:
        writer.prepare()
    pipeline.start_agents(hosts)

    topics = pipeline.topics
    live = ClusterCounter(pipeline.zk_as("reader", "live"), topics, pipeline.client("reader", "live"))
    analysis = (
        ClusterCounter(pipeline.zk_as("reader", "analysis"), topics, pipeline.client("reader", "analysis"))
        if pipeline.mirror
        else None
    )
    counters = [live] + ([analysis] if analysis else [])
    tally = Tally(topics=topics, hosts=hosts)
    peaks: dict[str, float] = {}
    last: dict[str, int] = {}

    def sample(elapsed: float, interval: float) -> None:
        for _, text in pipeline.exits():
            say(text)
        pipeline.check_lake()
        written = sum(c.records for w in writers for c in w.counts.values())
        in_live = sum(live.update().values())
        in_analysis = sum(analysis.update().values()) if analysis else 0
        for name, value in (("written", written), ("live", in_live), ("analysis", in_analysis)):
            rate = (value - last.get(name, 0)) / interval
            peaks[name] = max(peaks.get(name, 0.0), rate)
            last[name] = value
        acked = sum(int(read_status(s).get("counters", {}).get("messages_acked", 0)) for _, _, s in pipeline.agents)
        print(
            f"[{elapsed:5.1f}s] written {written:,} | agents acked {acked:,} | live {in_live:,} "
            f"| analysis {in_analysis:,} | dashboard: {_fmt_rates(dashboard.rates())}",
            flush=True,
        )

    t0 = time.monotonic()
    for writer in writers:
        writer.start()
    previous = t0
    while any(w.is_alive() for w in writers):
        time.sleep(PROGRESS_S)
        now = time.monotonic()
        sample(now - t0, now - previous)
        previous = now
    for writer in writers:
        if writer.error:
            raise DemoError(f"host {writer.host} failed: {writer.error!r}")
    t_written = time.monotonic() - t0
    written = {t: sum(w.counts[t].records for w in writers) for t in topics}
    tally.written = written
    tally.lines = {t: sum(w.counts[t].lines for w in writers) for t in topics}
    tally.rotations = writers[0].rotations
    say(
        f"hosts stopped writing: {sum(written.values()):,} records "
        f"({sum(tally.lines.values()):,} lines) in {t_written:.1f}s; draining"
    )

    # Drain: the live cluster holds every record (multiline records wait for their timeout).
    if not _wait_counts(live, written, args.drain_timeout):
        say(f"the live cluster did not receive everything within {args.drain_timeout:.0f}s")
    t_live = time.monotonic() - t0
    sample(t_live, max(time.monotonic() - previous, 1e-3))
    tally.agents_acked = pipeline.stop_agents()
    live_audit = ClusterCounter(
        pipeline.zk_as("reader", "live"), [pipeline.audit_topic], pipeline.client("reader", "live")
    )
    counters.append(live_audit)
    tally.audit_records["live"] = _settled(live_audit, pipeline.audit_topic)
    say(
        f"agents stopped: {tally.agents_acked:,} messages acknowledged, "
        f"{tally.audit_records['live']} audit records in the live cluster"
    )

    t_analysis = None
    audit_source = live_audit
    if analysis is not None:
        analysis_audit = ClusterCounter(
            pipeline.zk_as("reader", "analysis"), [pipeline.audit_topic], pipeline.client("reader", "analysis")
        )
        counters.append(analysis_audit)
        ok = _wait_counts(analysis, written, args.drain_timeout) and _wait_counts(
            analysis_audit, {pipeline.audit_topic: tally.audit_records["live"]}, args.drain_timeout
        )
        if not ok:
            say(f"the analysis cluster did not receive everything within {args.drain_timeout:.0f}s")
        t_analysis = time.monotonic() - t0
        tally.audit_records["analysis"] = _settled(analysis_audit, pipeline.audit_topic)
        tally.analysis = dict(analysis.counts)
        audit_source = analysis_audit
        say(f"mirror drained: analysis cluster holds {sum(tally.analysis.values()):,} messages")
    tally.live = live.update()
    if pipeline.console_url:
        say(console_status(pipeline.console_url))

    deadline = time.monotonic() + 15
    while any(dashboard.counts.get(t, 0) < n for t, n in written.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    t_dashboard = time.monotonic() - t0
    tally.dashboard = dict(dashboard.counts)
    dashboard.stop()

    sums = audit_sums(audit_source.values(pipeline.audit_topic))
    tally.audit_acked = {t: sums.acked.get(t, 0) for t in topics}

    # The loader: etc/loader.toml, reading the analysis cluster (or the live one).
    output = pipeline.warehouse
    loader_doc = configs.load(configs.loader_template())
    wanted = loader_doc.get("source", {}).get("topics", [])
    if sorted(wanted) != sorted(topics):
        tally.notes.append(
            f"etc/loader.toml lands topics {wanted} but etc/agent.toml publishes "
            f"{topics}: the demo lands the agent's topics"
        )
    source_zk = pipeline.analysis_zk if analysis is not None else pipeline.live_zk
    doc = configs.loader_config(loader_doc, source_zk, output, topics)
    sections = pipeline.sections("loader", "analysis" if analysis is not None else "live")
    if "zookeeper" in sections:  # the loader's login is [source.zookeeper]
        doc.setdefault("source", {})["zookeeper"] = sections.pop("zookeeper")
    doc.update(sections)
    lake, jar = pipeline.lake, None
    if lake is not None:
        hdfs = lake.wait()
        say(
            f"HDFS: {hdfs.uri} (NameNode pid {hdfs.pid('namenode')}, DataNode pid {hdfs.pid('datanode')}), "
            f"web UI http://{hdfs.http_address}/, logs {hdfs.log_dir}"
        )
        pipeline.follow_lake()
        jar = runtime_jar()
        if jar is None:
            raise DemoError(f"Apache Iceberg's Spark runtime is gone from {ICEBERG_JARS.jar_dir()}")
        doc = configs.land_as_iceberg(doc, lake.warehouse, jar)
        landing = f"as Iceberg tables into {lake.warehouse}"
        tally.landed_label = "Iceberg rows"
    else:
        landing = "as Parquet"
    loader_cfg = configs.write(workdir / "config" / "loader.toml", doc, configs.loader_template())
    say(
        f"loader: landing {', '.join(topics)} from {source_zk[len(pipeline.zk) :]} {landing} "
        f"(Spark local mode; the JVM takes a while to start)"
    )
    loader = pipeline.sup.add(
        Child.logferry("loader", ["load", "--config", str(loader_cfg)], workdir / "logs" / "loader.log"), watched=False
    )
    started = time.monotonic()
    code = loader.wait(args.loader_timeout)
    loader_s = time.monotonic() - started
    if code is None:
        loader.stop(10)
        raise DemoError(f"the loader did not finish within {args.loader_timeout:.0f}s; log {loader.log_path}")
    print(_loader_summary(loader.log_text()), flush=True)
    if code != 0:
        tally.notes.append(f"the loader exited with {code}: see {loader.log_path}")
    if lake is not None:
        tables = {t: lake.table_counts(t) for t in topics}
        if any(counts is not None for counts in tables.values()):
            tally.landed = {t: counts[0] if counts else 0 for t, counts in tables.items()}
            tally.landed_files = {t: counts[1] if counts else 0 for t, counts in tables.items()}
    elif output.exists():
        rows, tally.landed_files = parquet_rows(output)
        tally.landed = {t: rows.get(t, 0) for t in topics}
    if pipeline.console_url and code == 0:
        say(console_landed(pipeline.console_url))

    total = sum(written.values())
    tally.throughput = [
        ("hosts write log records", total, t_written, peaks.get("written")),
        ("agents ship them to the live cluster", total, t_live, peaks.get("live")),
        ("dashboard reads them from the live cluster", total, t_dashboard, None),
    ]
    if t_analysis is not None:
        tally.throughput.append(("mirror copies to the analysis cluster", total, t_analysis, peaks.get("analysis")))
    landed = sum((tally.landed or {}).values())
    what = "Iceberg tables on HDFS" if lake is not None else "Parquet"
    tally.throughput.append((f"loader lands {what} (Spark start included)", landed, loader_s, None))
    tally.notes += pipeline.notes

    if lake is not None and jar is not None:
        query = write_iceberg_query(workdir, lake.warehouse, lake.namespace, topics, jar)
        where = iceberg_where(lake, topics, tally.landed_files, str(query), _python(), _command(), jar)
    else:
        query = write_parquet_query(workdir, output, topics)
        where = parquet_where(output.as_uri(), tally.landed_files, str(query), _python())
    text = render(tally, where)
    found = problems(tally)
    text += "\n" + (
        "RESULT: OK: every stage holds exactly what the hosts wrote; audit 100% complete"
        if not found
        else "RESULT: MISMATCH\n" + "\n".join(f"  - {p}" for p in found)
    )
    print(text, flush=True)
    (workdir / "report.txt").write_text(text + "\n")
    for counter in counters:
        counter.close()
    if args.keep_running:
        keep_running(pipeline, writers, stop_hosts, args.keep_rate, _command())
    return 0 if not found else 1


def _loader_summary(log: str, limit: int = 40) -> str:
    """The loader's own summary and audit table (its stdout), without Spark's chatter."""
    lines = log.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if re.match(r"^(run \d+ committed|nothing new to land|recovery:)", line)),
        None,
    )
    if start is None:
        return "  | (no summary from the loader; last lines of its log:)\n" + "\n".join(
            "  | " + line for line in lines[-10:]
        )
    shown = [line for line in lines[start:] if not re.match(r"^\d{4}-\d\d-\d\d \d\d:", line)]
    return "\n".join("  | " + line for line in shown[:limit])


def _python() -> str:
    exe = Path(sys.executable)
    try:
        return str(exe.relative_to(configs.ROOT))
    except ValueError:
        return str(exe)


def _command() -> str:
    """How the user runs logferry here: the venv's script, the one on PATH, or ``-m``."""
    beside = Path(sys.executable).parent / "logferry"
    return (
        _python().replace("python", "logferry")
        if beside.exists()
        else "logferry"
        if shutil.which("logferry")
        else f"{_python()} -m broker"
    )
