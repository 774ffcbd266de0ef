"""The pipeline nemeses of issue 37: the WAN between the two datacenters cut under a real
agent and a real mirror, combined with kill -9 and SIGSTOP of the mirror, the agent and
a live broker.

:func:`two_datacenters` builds the deployment on the test network
(tests/support/network.py), once per module: on switch ``dc1`` (live) a ZooKeeper, two
brokers (replication factor 2, ZooKeeper session 6 s), the agent's host and the
mirror's host; on ``dc2`` (analysis) a ZooKeeper and a broker; a router ``wan`` between
them. :func:`run_pipeline_nemesis` then runs one nemesis: a :class:`LineWriter` appends
loghub lines to three files at a steady rate, a real agent (``python -m agent``) tails
them into the live cluster (two files to a topic that exists, the third, begun while
the WAN is cut, to a topic that does not), a real mirror (``python -m broker mirror``,
offset-preserving, the default) copies them to the analysis cluster; the WAN is cut
for :func:`wan_timing`'s hold (10 s in ``make test``, 60 s in ``scripts/nemesis.sh``),
during which the nemesis's ``during`` kills, freezes and restarts what it names; then
the WAN is healed, the writer stops, and :func:`~tests.support.checker.check_lines`
counts from the lines written to the records on the analysis cluster. Also measured:
how long after the heal the analysis cluster got the first bytes of the topic that
appeared during the cut (the copy resumed: the issue's target is within 10 s of the
analysis datacenter's return) and held everything.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack

from broker.client import Admin, SimpleConsumer
from broker.common.errors import LogferryError
from broker.testing.network import Host
from tests.agent.conftest import AgentProcess
from tests.agent.test_integration import _wait_shipped, base_doc, sample_lines
from tests.mirror.conftest import MirrorProcess, mirrored, read_batches, values_by_partition
from tests.support.brokers import BrokerProcess
from tests.support.checker import Line, LineVerdict, check_lines
from tests.support.nemesis import SETTINGS, Timing, keep_logs, record, timing
from tests.support.network import TestNetwork
from tests.support.waiting import wait_until

LIVE_SETTINGS = {**SETTINGS, "default_replication_factor": 2, "min_insync_replicas": 1}
"""The live brokers: the nemeses' settings (6 s session, 1.5 s replica lag), two
replicas per partition (one live broker may be killed), one in sync enough."""
WAN_CUT_S = 60.0
"""The long suite's cut (``scripts/nemesis.sh``): the issue's 60 s outage."""
RATE = 400
"""Lines per second over all the files (about the nemeses' 1,000 messages/s of the
workload at the agent's cost of a line)."""
RESUME_TARGET_S = 10.0
"""The issue's target: the mirror resumes within 10 s of the analysis datacenter's return."""
APP_PARTITIONS = 2


@dataclass
class Datacenters:
    """The deployment of :func:`two_datacenters`."""

    net: TestNetwork
    live_zk: str
    analysis_zk: str
    live: dict[int, BrokerProcess]
    analysis: BrokerProcess
    agent_host: Host
    mirror_host: Host


def two_datacenters(net: TestNetwork) -> Datacenters:
    """Build and start the two datacenters (see the module) on ``net``."""
    net.switch("dc1")
    net.switch("dc2")
    live_zk_host, analysis_zk_host = net.host("livezk", "dc1"), net.host("anazk", "dc2")
    agent_host, mirror_host = net.host("agent", "dc1"), net.host("mirror", "dc1")
    live_hosts = [net.host(f"live{i}", "dc1") for i in (1, 2)]
    analysis_host = net.host("ana1", "dc2")
    net.router("wan", "dc1", "dc2")
    live_zk = f"{net.zookeeper(live_zk_host).hosts}/live"
    analysis_zk = f"{net.zookeeper(analysis_zk_host).hosts}/analysis"
    live = {i: net.broker(host, i, live_zk, broker=LIVE_SETTINGS) for i, host in enumerate(live_hosts, 1)}
    # id 9: its log file (broker-9.log) is kept beside the live brokers' (broker-1, -2)
    analysis = net.broker(analysis_host, 9, analysis_zk, broker={"zk_session_timeout_s": 6.0})
    return Datacenters(net, live_zk, analysis_zk, live, analysis, agent_host, mirror_host)


def wan_timing(name: str) -> Timing:
    """:func:`tests.support.nemesis.timing`, with the long suite's hold the issue's 60 s
    (``LOGFERRY_NEMESIS_FAULT_S`` still overrides it)."""
    when = timing(name)
    if when.seed is not None and not os.environ.get("LOGFERRY_NEMESIS_FAULT_S"):
        return Timing(when.delay_s, WAN_CUT_S, when.seed)
    return when


def when_text(when: Timing) -> str:
    """The cut's timing, for the verdict line."""
    drawn = f", seed {when.seed}" if when.seed is not None else ""
    return f"WAN cut {when.delay_s:.1f}s after the first 1,000 lines mirrored, held {when.hold_s:.1f}s{drawn}"


def key_for(partition: int, partitions: int) -> str:
    """A message key the producer maps to ``partition`` (crc32 of the key, as it does)."""
    return next(k for k in (f"web{i}" for i in range(1000)) if zlib.crc32(k.encode()) % partitions == partition)


class LineWriter(threading.Thread):
    """Appends loghub lines (cycled) to the files it is given, round robin, at
    :data:`RATE` lines a second, recording each line's identity as the agent's record
    will carry it (:data:`~tests.support.checker.Line`: the file, its byte offset, the
    line). :meth:`add` adds a file while it runs."""

    def __init__(self, files: list[Path], rate: int = RATE):
        super().__init__(daemon=True, name="line-writer")
        self.files = list(files)
        self.rate = rate
        self.lines: list[Line] = []
        self.error: BaseException | None = None
        self._source = [raw.decode("utf-8", "replace") for raw in sample_lines()]
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def add(self, path: Path) -> None:
        with self._lock:
            self.files.append(path)

    def run(self) -> None:
        try:
            started, written = time.monotonic(), 0
            while not self._halt.is_set():
                with self._lock:
                    files = list(self.files)
                step = self.rate // 10
                for n, path in enumerate(files):
                    share = step // len(files) + (1 if n < step % len(files) else 0)
                    self._append(path, share)
                written += step
                self._halt.wait(max(0.0, started + written / self.rate - time.monotonic()))
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _append(self, path: Path, n: int) -> None:
        offset = path.stat().st_size if path.exists() else 0
        chunk = []
        for _ in range(n):
            line = self._source[len(self.lines) % len(self._source)]
            self.lines.append((str(path), offset, line))
            chunk.append(line + "\n")
            offset += len(line.encode()) + 1
        with path.open("a") as out:
            out.write("".join(chunk))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        assert not self.is_alive(), "the line writer did not stop"
        if self.error is not None:
            raise self.error


class MirrorExitedError(Exception):
    """The mirror process ended without the test ending it."""


WAITING_OUT = (LogferryError, OSError, AssertionError)
"""What a wait on the clusters rides out (a broker restarting, a partial read);
:class:`MirrorExitedError` is not among them."""


@dataclass
class Pipeline:
    """One nemesis's agent, mirror and files on :class:`Datacenters`; what its fault
    functions act on (the processes they restart replace the old ones here)."""

    dc: Datacenters
    name: str
    workdir: Path
    make_agent: Callable[[dict[str, Any]], AgentProcess]
    make_mirror: Callable[..., MirrorProcess]
    topics: list[str]
    agent_doc: dict[str, Any]
    mirror_args: dict[str, Any]
    writer: LineWriter
    agent: AgentProcess | None = None
    mirror: MirrorProcess | None = None
    mirror_exits: list[str] = field(default_factory=list)
    """Exit codes of mirror processes that ended without the test killing them."""
    agent_exit: int | None = None
    """The last agent's exit code on SIGTERM, once everything is shipped."""

    @property
    def app(self) -> str:
        return self.topics[0]

    def start_agent(self) -> AgentProcess:
        with self.dc.agent_host.inside():  # the agent's process on the live side's agent host
            self.agent = self.make_agent(self.agent_doc).start()
        return self.agent

    def start_mirror(self) -> MirrorProcess:
        with self.dc.mirror_host.inside():  # the mirror process on the live side, as deployed
            self.mirror = self.make_mirror(**self.mirror_args)
        return self.mirror

    def kill_mirror(self) -> None:
        assert self.mirror is not None
        self.check_mirror()
        self.mirror.kill()

    def check_mirror(self) -> None:
        """Note a mirror that exited by itself (it must ride every outage out)."""
        if self.mirror is not None and self.mirror.proc is not None and self.mirror.proc.poll() is not None:
            exit = f"exit {self.mirror.proc.poll()}: {self.mirror.log_tail(5)}"
            if exit not in self.mirror_exits:
                self.mirror_exits.append(exit)

    def mirror_running(self) -> None:
        """Raise :class:`MirrorExitedError` if the mirror exited by itself (a wait for
        its copy would only time out)."""
        self.check_mirror()
        if self.mirror_exits:
            raise MirrorExitedError(f"the mirror exited by itself: {self.mirror_exits}")

    def signal_mirror(self, sig: int) -> None:
        assert self.mirror is not None and self.mirror.proc is not None
        self.mirror.proc.send_signal(sig)

    def signal_agent(self, sig: int) -> None:
        assert self.agent is not None and self.agent.proc is not None
        self.agent.proc.send_signal(sig)

    def source_leader(self) -> int:
        """The live broker leading the partition of the agent's first file."""
        with self.dc.agent_host.inside(), Admin(zk=self.dc.live_zk) as admin:
            return admin.describe_partitions(self.app)[0].leader


def pipeline(
    dc: Datacenters,
    name: str,
    workdir: Path,
    agent_process: Callable[[dict[str, Any]], AgentProcess],
    mirrors: Callable[..., MirrorProcess],
) -> Pipeline:
    """A nemesis's topics (``<name>.app``, created with 2 partitions; ``<name>.new``, made
    by the agent's first line to it, during the cut; the agent's audit topic
    ``<name>.audit``), the agent's config (three files: ``a.log`` and ``b.log`` keyed
    to the two partitions of ``.app``, ``c.log`` to ``.new``; acks=all), the mirror's
    (preserve mode, those topics, its own group) and the writer (of a.log and b.log for
    now); nothing started."""
    stem = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    topics = [f"{stem}.app", f"{stem}.new", f"{stem}.audit"]
    with dc.agent_host.inside(), Admin(zk=dc.live_zk) as admin:
        admin.create_topic(topics[0], partitions=APP_PARTITIONS, replication_factor=2)
    logs = workdir / "logs"
    live_addresses = [b.address for b in dc.live.values()]
    doc = base_doc(
        workdir,
        live_addresses,
        topics[0],
        topics[2],
        producer={"acks": "all", "linger_ms": 5, "delivery_timeout_s": 60.0, "request_timeout_s": 5.0},
    )
    doc["host"] = stem
    doc["sources"] = [
        {"name": "a", "pattern": str(logs / "a.log"), "topic": topics[0], "key": key_for(0, APP_PARTITIONS)},
        {"name": "b", "pattern": str(logs / "b.log"), "topic": topics[0], "key": key_for(1, APP_PARTITIONS)},
        {"name": "new", "pattern": str(logs / "c.log"), "topic": topics[1]},
    ]
    source = SimpleNamespace(zk_connect=dc.live_zk)
    target = SimpleNamespace(zk_connect=dc.analysis_zk)
    mirror_args = {
        "name": f"mirror-{stem}",
        "source": source,
        "target": target,
        "mode": "preserve",
        "group": f"mirror-{stem}",
        "topics": topics,
        "request_timeout_s": 2.0,
    }
    writer = LineWriter([logs / "a.log", logs / "b.log"])
    return Pipeline(dc, name, workdir, agent_process, mirrors, topics, doc, mirror_args, writer)


def differing(dc: Datacenters, topics: list[str]) -> list[str]:
    """The topic-partitions whose analysis copy is not the live one, batch for batch
    (the offset-preserving mirror: the same bytes at the same offsets)."""
    found = []
    for topic in topics:
        live, analysis = read_batches(dc.live_zk, topic), read_batches(dc.analysis_zk, topic)
        found += [f"{topic}-{p}" for p, batches in live.items() if analysis.get(p, []) != batches]
    return found


def records(zk: str, topics: list[str]) -> dict[str, list[Line]]:
    """Every agent record of ``topics`` on the cluster at ``zk``, per topic-partition."""
    out: dict[str, list[Line]] = {}
    for topic in topics:
        for p, values in values_by_partition(zk, topic).items():
            decoded = (msgpack.unpackb(v) for v in values)
            out[f"{topic}-{p}"] = [(r["file"], r["offset"], r["line"]) for r in decoded if "line" in r]
    return out


def run_pipeline_nemesis(
    pipe: Pipeline,
    during: Callable[[Pipeline, float, float], str],
    heal: Callable[[Pipeline], str] | None = None,
) -> LineVerdict:
    """Run one pipeline nemesis (see the module): start the writer, the agent and the
    mirror; once the analysis cluster holds the first 1,000 lines and :func:`wan_timing`'s
    delay passed, cut the WAN and call ``during(pipe, cut_at, hold_s)`` (it acts at
    moments of the cut, bounded, and returns what it did), begin the new topic's file,
    hold the cut, heal it, call ``heal`` (start what ``during`` left killed), stop the
    writer, wait for the agent to ship everything and the mirror to copy it, count.

    Prints ``verdict: <name> <hold>s: <summary>; <what was done>; <timing>`` and, for
    ``scripts/nemesis.sh``, records it (:func:`tests.support.nemesis.record`)."""
    dc, net = pipe.dc, pipe.dc.net
    when = wan_timing(pipe.name)
    topics = pipe.topics
    pipe.writer.start()
    try:
        pipe.start_agent()
        pipe.start_mirror()
        with dc.agent_host.inside():
            wait_until(
                lambda: sum(len(v) for v in records(dc.analysis_zk, topics[:1]).values()) >= 1_000,
                60,
                "the first 1,000 lines on the analysis cluster",
                interval=0.5,
                ignore=WAITING_OUT,
            )
        time.sleep(when.delay_s)  # the timing drawn: time is the scenario
        net.cut("wan", "dc2")
        cut_at = time.monotonic()
        pipe.writer.add(pipe.workdir / "logs" / "c.log")  # a topic the analysis side has never seen
        did = [during(pipe, cut_at, when.hold_s)]
        time.sleep(max(0.0, cut_at + when.hold_s - time.monotonic()))  # the cut: time is the scenario
        pipe.check_mirror()
        net.heal()
        healed_at = time.monotonic()
        if heal is not None:
            did.append(heal(pipe))
        with dc.agent_host.inside():
            # asked of the analysis broker itself: a client through ZooKeeper opens two
            # sessions per look, which on a loaded machine made the measure a second late
            with SimpleConsumer(brokers=[dc.analysis.address], request_timeout=2.0, metadata_retries=1) as analysis:

                def resumed() -> bool:  # the first bytes of the topic that appeared during the cut
                    pipe.mirror_running()
                    try:
                        return any(analysis.offsets(topics[1], p).end > 0 for p in analysis.partitions(topics[1]))
                    except LogferryError:
                        return False

                wait_until(resumed, 60, "the new topic's first bytes on the analysis cluster", interval=0.05)
            resumed_s = time.monotonic() - healed_at
            pipe.writer.stop()
            assert pipe.agent is not None
            _wait_shipped(pipe.agent, 90)
            pipe.agent_exit = pipe.agent.terminate()  # its audit records final too
            for topic in topics:

                def copied(t: str = topic) -> bool:
                    pipe.mirror_running()
                    return mirrored(dc.live_zk, dc.analysis_zk, t, exact=True)

                wait_until(copied, 90, f"{topic} copied whole", interval=0.5, ignore=WAITING_OUT)
            caught_up_s = time.monotonic() - healed_at
            pipe.check_mirror()
            verdict = check_lines(
                pipe.writer.lines,
                records(dc.live_zk, topics[:2]),
                records(dc.analysis_zk, topics[:2]),
                differing(dc, topics),
            )
    finally:
        if pipe.writer.is_alive():
            pipe.writer.stop()
        if pipe.agent is not None and pipe.agent.running():
            pipe.signal_agent(signal.SIGCONT)  # a nemesis that failed with it frozen
        if pipe.mirror is not None and pipe.mirror.alive():
            pipe.signal_mirror(signal.SIGCONT)
    verdict.resumed_s, verdict.caught_up_s = round(resumed_s, 1), round(caught_up_s, 1)
    print(f"\nverdict: {pipe.name} {when.hold_s:g}s: {verdict.summary()}; {'; '.join(did)}; {when_text(when)}")
    keep_logs(net, pipe.name, [p.log_file for p in (pipe.agent, pipe.mirror) if p is not None])
    record(pipe.name, when, verdict)
    return verdict


def assert_pipeline_sound(pipe: Pipeline, verdict: LineVerdict) -> None:
    """What every pipeline nemesis must keep: every line written on the analysis
    cluster, once, in order per file and partition, the analysis copy the live one byte
    for byte, the mirror never exited by itself (it rides the outage out), no traceback
    in its log, and the copy resumed within the issue's 10 s of the WAN's return."""
    assert not verdict.problems(), f"{verdict.problems()}: {verdict.examples}"
    assert verdict.written > 1_000 and verdict.mirrored == verdict.written  # written N, mirrored N
    assert not pipe.mirror_exits, f"the mirror exited by itself: {pipe.mirror_exits}"
    assert pipe.agent_exit == 0, f"the agent exited {pipe.agent_exit} on SIGTERM"
    assert pipe.mirror is not None and pipe.mirror.alive(), pipe.mirror.log_tail() if pipe.mirror else ""
    log = pipe.mirror.log_file.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
    assert verdict.resumed_s is not None and verdict.resumed_s < RESUME_TARGET_S, (
        f"the copy resumed {verdict.resumed_s}s after the WAN's return (issue 37's target: {RESUME_TARGET_S:g} s)"
    )


__all__ = [
    "Datacenters",
    "LineWriter",
    "MirrorExitedError",
    "Pipeline",
    "assert_pipeline_sound",
    "pipeline",
    "run_pipeline_nemesis",
    "two_datacenters",
    "wan_timing",
]
