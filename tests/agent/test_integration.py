"""The agent as a real process against real broker processes: count every line.

Each test writes real files, runs ``python -m agent`` and reads the topic back with
``SimpleConsumer``; the assertions are counts (every line exactly once, or at least
once across a kill -9) and order per file.

The tests share the module's broker (``module_cluster``), each with topics of its own
(its lines' topic and its audit topic, named with ``unique_name``); the one that stops
the broker for 10 s starts a broker of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import consume, wait_until

pytestmark = pytest.mark.integration

LOGHUB = Path("/work/shared/data/loghub")


def sample_lines() -> list[bytes]:
    """Realistic lines (loghub samples), or synthetic ones when the samples are absent."""
    lines: list[bytes] = []
    for name in ("HDFS_2k.log", "Spark_2k.log", "Zookeeper_2k.log", "OpenSSH_2k.log"):
        path = LOGHUB / name
        if path.exists():
            lines += [line for line in path.read_bytes().splitlines() if line]
    return lines or [b"2024-01-01 00:00:00 INFO synthetic line %d" % i for i in range(2000)]


def base_doc(
    tmp_path: Path, bootstrap: list[str], topic: str = "app", audit_topic: str = "_audit", **extra: Any
) -> dict[str, Any]:
    """The agent's config: files ``logs/*.log`` to ``topic``, audit records to ``audit_topic``."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    doc: dict[str, Any] = {
        "host": "it-host",
        "state_dir": str(tmp_path / "state"),
        "poll_interval_s": 0.05,
        "scan_interval_s": 1.0,
        "checkpoint_interval_s": 0.2,
        "rotated_close_s": 1.0,
        "shutdown_timeout_s": 20.0,
        "log_level": "INFO",
        "cluster": {"brokers": bootstrap},
        "producer": {"linger_ms": 5, "delivery_timeout_s": 10.0, "request_timeout_s": 5.0},
        "audit": {"window_s": 2, "topic": audit_topic},
        "sources": [{"name": "app", "pattern": f"{logs}/*.log", "topic": topic}],
    }
    doc.update(extra)
    return doc


def test_lines_arrive_once_and_sigterm_exits_zero(module_cluster, unique_name, agent_process, tmp_path):
    cluster, app = module_cluster, unique_name("app")
    doc = base_doc(tmp_path, cluster.bootstrap, app, unique_name("_audit"))
    lines = sample_lines()[:5000]
    (tmp_path / "logs" / "a.log").write_bytes(b"\n".join(lines) + b"\n")
    agent = agent_process(doc).start()
    wait_until(lambda: agent.counter("messages_acked") >= len(lines), 30, "acks")
    assert agent.terminate() == 0
    got = consume(cluster.bootstrap, app)
    assert [v["line"].encode() for _, _, v in got] == lines
    assert {v["host"] for _, _, v in got} == {"it-host"}
    assert [v["offset"] for _, _, v in got][:2] == [0, len(lines[0]) + 1]


def test_ctrl_c_stops_cleanly_and_exits_130(module_cluster, unique_name, agent_process, tmp_path):
    """Ctrl-C is SIGTERM's clean stop (every acked line checkpointed), with the exit code
    of every logferry command after Ctrl-C."""
    import signal

    cluster = module_cluster
    doc = base_doc(tmp_path, cluster.bootstrap, unique_name("app"), unique_name("_audit"))
    (tmp_path / "logs" / "a.log").write_bytes(b"one\ntwo\n")
    agent = agent_process(doc).start()
    wait_until(lambda: agent.counter("messages_acked") >= 2, 30, "acks")
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(60) == 130, agent.log_tail()
    assert "Traceback" not in agent.log_tail()


def _line(gen: int, seq: int, sample: list[bytes]) -> bytes:
    return b"g%03d s%07d %s" % (gen, seq, sample[seq % len(sample)][:150])


def _parse(value: dict[str, Any]) -> tuple[int, int]:
    gen, seq = value["line"].split(" ", 2)[:2]
    return int(gen[1:]), int(seq[1:])


def _wait_shipped(agent, timeout: float = 60.0, acked: int | None = None) -> None:
    """Wait until the agent has acknowledged everything written so far.

    With ``acked``, until its acknowledged counter reaches it; always until a status
    taken well after the call (files polled since) shows no lag and nothing in flight.
    """
    since = time.time() + 0.5

    def done() -> bool:
        status = agent.status()
        gauges = status.get("gauges", {})
        if acked is not None and status.get("counters", {}).get("messages_acked", 0) < acked:
            return False
        return (
            status.get("updated", 0) > since
            and gauges.get("lag_bytes", 1) == 0
            and gauges.get("inflight_bytes", 1) == 0
            and gauges.get("tracked_files", 0) > 0
        )

    try:
        wait_until(done, timeout, "agent caught up")
    except AssertionError as exc:
        status = agent.status()
        lagging = [f for f in status.get("files", []) if f["lag"]][:5]
        print(json.dumps(status.get("files"), indent=1))
        raise AssertionError(
            f"{exc}; counters {status.get('counters')}, gauges {status.get('gauges')}, lagging files {lagging}"
        ) from None


def test_200k_lines_with_rename_rotations_and_a_copytruncate(module_cluster, unique_name, agent_process, tmp_path):
    """Rotate by rename every 20,000 lines, copytruncate once: every line once, in order."""
    cluster, app = module_cluster, unique_name("app")
    doc = base_doc(tmp_path, cluster.bootstrap, app, unique_name("_audit"))
    agent = agent_process(doc).start()
    sample = sample_lines()
    log = tmp_path / "logs" / "app.log"
    total, per_file, batch = 200_000, 20_000, 1_000
    gen = 0
    copytruncate_at = 110_000
    for start in range(0, total, batch):
        if start and start % per_file == 0:
            os.rename(log, log.with_name(f"app.log.{gen}"))
            gen += 1
        if start == copytruncate_at:
            # copytruncate loses what the agent has not read when the copy is taken
            # (inherent to copytruncate); a logrotate run comes after a quiet moment.
            _wait_shipped(agent, acked=start)
            shutil.copyfile(log, log.with_name("app.log.copy"))
            os.truncate(log, 0)
            gen += 1  # same inode, new content: number it as another file
        with open(log, "ab") as handle:
            handle.write(b"\n".join(_line(gen, s, sample) for s in range(start, start + batch)) + b"\n")
        time.sleep(0.002)
    _wait_shipped(agent, 120, acked=total)
    assert agent.terminate() == 0
    messages = consume(cluster.bootstrap, app)
    partitions = {p for p, _, _ in messages}
    got = [_parse(v) for _, _, v in messages]
    seqs = [seq for _, seq in got]
    assert len(seqs) == total, f"{len(seqs)} messages for {total} lines"
    assert sorted(seqs) == list(range(total)), "lines missing or duplicated"
    by_gen: dict[int, list[int]] = {}
    for g, seq in got:
        by_gen.setdefault(g, []).append(seq)
    assert all(v == sorted(v) for v in by_gen.values()), "out of order within a file"
    assert seqs == sorted(seqs), f"rotated file not finished before its successor ({partitions})"
    assert agent.status()["counters"]["truncations"] >= 1
    assert agent.status()["counters"]["rotations"] >= 9


def test_kill_9_then_restart_loses_nothing(module_cluster, unique_name, agent_process, tmp_path):
    """kill -9 mid-stream; rotate while the agent is dead; restart: every line arrives."""
    cluster, app = module_cluster, unique_name("app")
    doc = base_doc(tmp_path, cluster.bootstrap, app, unique_name("_audit"))
    sample = sample_lines()
    log = tmp_path / "logs" / "app.log"
    agent = agent_process(doc).start()
    seq = 0

    def write(n: int, gen: int) -> None:
        nonlocal seq
        with open(log, "ab") as handle:
            handle.write(b"\n".join(_line(gen, s, sample) for s in range(seq, seq + n)) + b"\n")
        seq += n

    for _ in range(40):
        write(1000, 0)
        time.sleep(0.005)
    wait_until(lambda: agent.counter("messages_acked") >= 10_000, 30, "first acks")
    agent.kill()
    acked_before = agent.counter("messages_acked")
    write(5000, 0)
    os.rename(log, log.with_name("app.log.1"))  # rotated while the agent is down
    write(5000, 1)
    restarted = agent_process(doc).start()
    for _ in range(10):
        write(1000, 1)
    _wait_shipped(restarted, 60)
    assert restarted.terminate() == 0
    got = [_parse(v)[1] for _, _, v in consume(cluster.bootstrap, app)]
    assert set(got) == set(range(seq)), f"missing: {sorted(set(range(seq)) - set(got))[:10]}"
    duplicates = len(got) - seq
    # Only lines sent but not yet checkpointed when the agent died come twice.
    assert duplicates <= seq - acked_before + 50_000
    first_seen = list(dict.fromkeys(got))
    assert first_seen == sorted(first_seen)


@pytest.mark.slow
def test_brokers_stopped_10s_memory_stays_under_cap(broker_cluster, agent_process, tmp_path):
    """Stop the broker for 10 s while lines keep coming: nothing lost, in flight <= cap."""
    cluster = broker_cluster(1)
    cap = 2 * 1024 * 1024
    doc = base_doc(tmp_path, cluster.bootstrap, max_inflight_bytes=cap, read_chunk_bytes=256 * 1024)
    doc["producer"] = {"linger_ms": 5, "delivery_timeout_s": 60.0, "request_timeout_s": 5.0}
    agent = agent_process(doc).start()
    sample = sample_lines()
    log = tmp_path / "logs" / "app.log"
    seq = 0
    broker = cluster.brokers[0]
    stopped_at = restarted_at = None
    # Lines keep coming for 2 s, through 10 s of broker downtime (however long its
    # clean stop takes) and for 4 s after the restart; bounded at 60 s in all.
    began = time.monotonic()
    deadline = began + 60
    while time.monotonic() < deadline and (restarted_at is None or time.monotonic() - restarted_at < 4):
        with open(log, "ab") as handle:
            handle.write(b"\n".join(_line(0, s, sample) for s in range(seq, seq + 500)) + b"\n")
        seq += 500
        time.sleep(0.05)
        elapsed = time.monotonic() - began
        if stopped_at is None and elapsed > 2:
            broker.stop()
            stopped_at = time.monotonic()
        if stopped_at is not None and restarted_at is None and time.monotonic() - stopped_at >= 10:
            broker.start()
            restarted_at = time.monotonic()
    assert restarted_at is not None
    _wait_shipped(agent, 90)
    gauges = agent.status()["gauges"]
    peak_rss_mib = agent.peak_rss_kib() / 1024
    assert agent.terminate() == 0
    got = [_parse(v)[1] for _, _, v in consume(cluster.bootstrap, "app")]
    assert set(got) == set(range(seq)), "lines lost while the broker was down"
    assert gauges["inflight_bytes_max"] <= cap, gauges
    print(f"agent peak RSS {peak_rss_mib:.0f} MiB, peak in flight {gauges['inflight_bytes_max']}")
    assert peak_rss_mib < 100, f"agent peak RSS {peak_rss_mib:.0f} MiB"
    first_seen = list(dict.fromkeys(got))
    assert first_seen == sorted(first_seen)


def test_inode_reuse_reads_the_new_file_from_its_start(module_cluster, unique_name, agent_process, tmp_path, request):
    """A deleted file's inode reused by a new file: read from 0, in all three situations.

    1. The agent had the file open: it drains the deleted file, closes it (freeing the
       inode) and forgets it; the new file is new.
    2. The agent had closed the file while idle: same inode *and same size*, only the
       fingerprint of the first bytes tells the files apart.
    3. The agent was stopped: the checkpoint's fingerprint tells them apart.
    """
    # ext4 hands a freed inode out again only within the second it was freed (later
    # it counts as "recently deleted" for a minute): new files are created the moment
    # the old one is let go of, early in a second.
    cluster, app = module_cluster, unique_name("app")
    doc = base_doc(tmp_path, cluster.bootstrap, app)
    doc["sources"][0]["idle_close_s"] = 0.5
    doc["audit"] = {"enabled": False}  # no audit topic created (files, inodes) mid-test
    # The agent's own state files (temp + rename) would grab the freed inode first:
    # keep them on another file system when there is one.
    if Path("/dev/shm").is_dir():
        state = Path(tempfile.mkdtemp(prefix="agent-state-", dir="/dev/shm"))
        request.addfinalizer(lambda: shutil.rmtree(state, ignore_errors=True))
        doc["state_dir"] = str(state)
    logs = tmp_path / "logs"
    path = logs / "reuse.log"
    expected: list[str] = []

    reused: list[str] = []

    def replace(prefix: str, n: int) -> None:
        """Delete and recreate the file within one second, so its inode can be reused."""
        wait_until(lambda: time.time() % 1 < 0.3, 2, "the start of a second")
        path.unlink()
        write(prefix, n, inode)

    def write(prefix: str, n: int, inode: int | None = None) -> None:
        """Write a new file; with ``inode``, try a few times to get that inode."""
        content = b"".join(b"%s line %03d\n" % (prefix.encode(), i) for i in range(n))
        for attempt in range(20):
            path.write_bytes(content)
            if inode is None or path.stat().st_ino == inode or attempt == 19:
                break
            path.unlink()
        if inode is not None and path.stat().st_ino == inode:
            reused.append(prefix)
        expected.extend(f"{prefix} line {i:03d}" for i in range(n))

    write("first", 100)
    inode = path.stat().st_ino
    agent = agent_process(doc).start()
    _wait_shipped(agent, acked=100)
    # 1: deleted while open; the agent drains and closes it, freeing the inode.
    wait_until(lambda: time.time() % 1 < 0.3, 2, "the start of a second")
    path.unlink()
    fds = Path(f"/proc/{agent.proc.pid}/fd")

    def released() -> bool:
        for fd in fds.iterdir():
            try:
                if os.readlink(fd).startswith(str(path)):
                    return False
            except OSError:
                continue
        return True

    wait_until(released, 20, "deleted file closed")
    write("SECOND", 300, inode)  # longer: resuming at the old offset would skip its start
    _wait_shipped(agent, acked=400)
    # 2: closed while idle, then replaced by a file of the very same size.
    wait_until(lambda: agent.status()["gauges"]["open_files"] == 0 and released(), 20, "idle file closed")
    inode = path.stat().st_ino
    replace("THIRD!", 300)
    _wait_shipped(agent, acked=700)
    assert agent.terminate() == 0
    # 3: replaced while the agent is stopped.
    inode = path.stat().st_ino
    replace("FOURTH", 200)
    restarted = agent_process(doc).start()
    _wait_shipped(restarted, acked=200)
    assert restarted.terminate() == 0
    # Every file's every line, once and in order, whether or not an inode came back:
    # checked first, so a file system that never reuses inodes still tests the content.
    lines = [v["line"] for _, _, v in consume(cluster.bootstrap, app)]
    assert lines == expected
    if not reused:
        pytest.skip("content checked, but the file system never reused the inode: the reuse paths were not exercised")


def test_stack_trace_partial_line_huge_line_garbage_and_1000_files(
    module_cluster, unique_name, agent_process, tmp_path
):
    """The awkward inputs, each to its own topic, in one agent run."""
    cluster = module_cluster
    topics = {name: unique_name(name) for name in ("java", "odd", "big", "many")}
    logs = tmp_path / "logs"
    many = tmp_path / "many"
    for d in ("java", "odd", "big"):
        (logs / d).mkdir(parents=True)
    many.mkdir()
    doc = base_doc(
        tmp_path,
        cluster.bootstrap,
        audit_topic=unique_name("_audit"),
        max_inflight_bytes=64 * 1024 * 1024,
        max_open_files=64,
    )
    doc["sources"] = [
        {
            "name": "java",
            "pattern": f"{logs}/java/*.log",
            "topic": topics["java"],
            "multiline": {"start": r"^\d{4}-\d\d-\d\d ", "timeout_s": 0.5},
        },
        {"name": "odd", "pattern": f"{logs}/odd/*.log", "topic": topics["odd"], "partial_line_timeout_s": 0.5},
        {"name": "big", "pattern": f"{logs}/big/*.log", "topic": topics["big"], "max_line_bytes": 1024 * 1024},
        {"name": "many", "pattern": f"{many}/**/*.log", "topic": topics["many"]},
    ]
    trace = (
        "2024-05-01 10:00:00 ERROR request failed\n"
        "java.lang.IllegalStateException: boom\n"
        "\tat com.example.Foo.bar(Foo.java:42)\n"
        "\tat com.example.Main.main(Main.java:7)\n"
        "Caused by: java.io.IOException: disk\n"
        "\t... 2 more\n"
    )
    (logs / "java" / "app.log").write_text(
        "2024-05-01 09:59:59 INFO starting\n" + trace + "2024-05-01 10:00:01 INFO next\n"
    )
    (logs / "odd" / "partial.log").write_bytes(b"complete line\nno newline at the end")
    rng = __import__("random").Random(4)
    garbage = bytes(rng.randrange(256) for _ in range(200_000))
    (logs / "odd" / "garbage.log").write_bytes(garbage)
    big_line = bytes(65 + i % 26 for i in range(10 * 1024 * 1024))
    (logs / "big" / "big.log").write_bytes(b"before\n" + big_line + b"\nafter\n")
    for i in range(1000):
        sub = many / f"d{i % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:04d}.log").write_bytes(b"".join(b"file %04d line %d\n" % (i, j) for j in range(3)))
    agent = agent_process(doc).start()
    garbage_parts = len(garbage.split(b"\n"))  # the last part has no newline: flushed
    expected_total = 3 + 2 + garbage_parts + 12 + 3000
    _wait_shipped(agent, 120, acked=expected_total)
    status = agent.status()
    assert status["gauges"]["open_files"] <= 64
    assert agent.terminate() == 0

    java = [v["line"] for _, _, v in consume(cluster.bootstrap, topics["java"])]
    assert java == ["2024-05-01 09:59:59 INFO starting", trace.rstrip("\n"), "2024-05-01 10:00:01 INFO next"]

    odd = consume(cluster.bootstrap, topics["odd"])
    partial = [v["line"] for _, _, v in odd if v["file"].endswith("partial.log")]
    assert partial == ["complete line", "no newline at the end"]
    junk = [v for _, _, v in odd if v["file"].endswith("garbage.log")]
    assert len(junk) == garbage_parts
    # A line ending in "\r\n" loses the "\r" too (CRLF files).
    assert [v["line"] for v in junk] == [p.removesuffix(b"\r").decode("utf-8", "replace") for p in garbage.split(b"\n")]
    assert [v["offset"] for v in junk][:2] == [0, len(garbage.split(b"\n")[0]) + 1]

    big = [v for _, _, v in consume(cluster.bootstrap, topics["big"])]
    assert big[0]["line"] == "before" and big[-1]["line"] == "after"
    pieces = big[1:-1]
    assert len(pieces) == 10
    assert "".join(p["line"] for p in pieces).encode() == big_line
    assert [bool(p.get("cut")) for p in pieces] == [True] * 9 + [False]
    assert status["counters"]["lines_cut"] == 1

    files: dict[str, list[str]] = {}
    for _, _, v in consume(cluster.bootstrap, topics["many"]):
        files.setdefault(v["file"], []).append(v["line"])
    assert len(files) == 1000
    for path, lines in files.items():
        number = int(Path(path).stem[1:])
        assert lines == [f"file {number:04d} line {j}" for j in range(3)]


def test_audit_counts_equal_topic_counts_per_window(module_cluster, unique_name, agent_process, tmp_path):
    """Each window's acked count in _audit equals the messages whose time read is in it."""
    cluster = module_cluster
    app, other, audit = unique_name("app"), unique_name("other"), unique_name("_audit")
    doc = base_doc(tmp_path, cluster.bootstrap, app, audit)
    doc["audit"] = {"window_s": 1, "topic": audit}
    doc["sources"].append({"name": "other", "pattern": f"{tmp_path}/logs/*.txt", "topic": other})
    agent = agent_process(doc).start()
    sample = sample_lines()
    written = 0
    deadline = time.monotonic() + 4.5  # spans several 1 s windows
    while time.monotonic() < deadline:
        with open(tmp_path / "logs" / "app.log", "ab") as handle:
            handle.write(b"\n".join(sample[(written + i) % len(sample)] for i in range(300)) + b"\n")
        with open(tmp_path / "logs" / "x.txt", "ab") as handle:
            handle.write(b"other line\n" * 50)
        written += 300
        time.sleep(0.05)
    _wait_shipped(agent, 60)
    assert agent.terminate() == 0
    counted: dict[tuple[str, int], int] = {}
    for topic in (app, other):
        for _, message, value in consume(cluster.bootstrap, topic):
            assert message.timestamp == value["time"]
            window = value["time"] - value["time"] % 1000
            counted[(topic, window)] = counted.get((topic, window), 0) + 1
    audited: dict[tuple[str, int], int] = {}
    for _, _message, record in consume(cluster.bootstrap, audit):
        assert record["host"] == "it-host" and record["stage"] == "agent"
        assert record["window_end"] - record["window_start"] == 1000
        key = (record["topic"], record["window_start"])
        audited[key] = audited.get(key, 0) + record["acked"]
        assert record["sent"] >= record["acked"]
    assert len(counted) >= 4
    assert audited == counted
    assert sum(v for (t, _), v in counted.items() if t == app) == written
