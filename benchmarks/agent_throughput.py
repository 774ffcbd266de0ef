"""Agent throughput: lines/s and MB/s from a file being appended to the broker's ack.

One agent process (``python -m agent``) tails one file; this script appends N lines of
200 bytes (199 + newline) to it as fast as it can and stops the clock when the agent
reports every line acknowledged by the broker. ZooKeeper and one broker run as
separate processes on 127.0.0.1 (benchmarks/harness.py). A fresh agent and a fresh
file per run; the figures are the median of ``--runs`` runs.

CPU: the agent process's user + system seconds over the timed part of the run
(``/proc/<pid>/stat``, the same counters ``getrusage`` reports for that process),
per 100,000 lines. The whole life of the process (start-up, shutdown included) is
printed too, from ``os.wait4``'s rusage.

    .venv/bin/python benchmarks/agent_throughput.py                  # 1,000,000 lines x 3
    .venv/bin/python benchmarks/agent_throughput.py --lines 200000 --runs 5

Target (issue 4): >= 50 MB/s of log lines per agent on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.harness import LocalCluster  # noqa: E402

LINE_BYTES = 200
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_lines(count: int) -> bytes:
    """``count`` distinct 200-byte lines (199 bytes + newline), log-like."""
    filler = (
        b"INFO  [worker-7] com.example.shop.CheckoutService: order placed items=3 "
        b"total=42.50 user=u-000000 session=abcdef0123456789 latency_ms=12 "
    )
    out = []
    for i in range(count):
        head = b"2024-05-01 10:00:%02d,%03d seq=%09d " % (i // 1000 % 60, i % 1000, i)
        out.append((head + filler)[: LINE_BYTES - 1].ljust(LINE_BYTES - 1, b"x"))
    return b"\n".join(out) + b"\n"


def agent_config(workdir: Path, bootstrap: list[str], run: int) -> Path:
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    brokers = ", ".join(f'"{b}"' for b in bootstrap)
    text = f"""
host = "bench-host"
state_dir = "{workdir / f"state-{run}"}"
poll_interval_s = 0.05
checkpoint_interval_s = 1.0
log_level = "WARNING"

[cluster]
brokers = [{brokers}]

[producer]
linger_ms = 5
batch_bytes = 1048576

[[sources]]
name = "bench"
pattern = "{logs}/run-{run}.log"
topic = "bench"
"""
    path = workdir / f"agent-{run}.toml"
    path.write_text(text)
    return path


def status(workdir: Path, run: int) -> dict[str, Any]:
    try:
        return json.loads((workdir / f"state-{run}" / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def one_run(
    workdir: Path, bootstrap: list[str], run: int, data: bytes, lines: int, timeout: float, broker_pids: list[int]
) -> dict[str, float]:
    config = agent_config(workdir, bootstrap, run)
    log_out = (workdir / f"agent-{run}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "--config", str(config)],
        stdout=log_out,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
    )
    log_out.close()
    try:
        deadline = time.monotonic() + 30
        while status(workdir, run).get("state") != "running":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agent did not start; see {workdir}/agent-{run}.log")
            time.sleep(0.02)
        path = workdir / "logs" / f"run-{run}.log"
        cpu0 = cpu_seconds(proc.pid)
        broker0 = sum(cpu_seconds(pid) for pid in broker_pids)
        start = time.perf_counter()
        with open(path, "ab") as handle:
            step = 4 * 1024 * 1024
            for i in range(0, len(data), step):
                handle.write(data[i : i + step])
                handle.flush()
        written = time.perf_counter() - start
        deadline = time.monotonic() + timeout
        while True:
            acked = status(workdir, run).get("counters", {}).get("messages_acked", 0)
            if acked >= lines:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"only {acked} of {lines} lines acknowledged; see {workdir}/agent-{run}.log")
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(proc.pid) - cpu0
        broker_cpu = sum(cpu_seconds(pid) for pid in broker_pids) - broker0
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, code, usage = os.wait4(proc.pid, 0)
        proc.returncode = code
    return {
        "elapsed": elapsed,
        "written": written,
        "cpu": cpu,
        "rss": rss,
        "broker_cpu": broker_cpu,
        "life_cpu": usage.ru_utime + usage.ru_stime,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines per run")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is reported")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--workdir", type=Path, default=None, help="where servers keep data")
    args = parser.parse_args()
    data = make_lines(args.lines)
    results = []
    with tempfile.TemporaryDirectory(prefix="agent-bench-", dir=args.workdir) as tmp:
        workdir = Path(tmp)
        with LocalCluster(workdir / "cluster", brokers=1) as cluster:
            for run in range(args.runs):
                result = one_run(workdir, cluster.bootstrap, run, data, args.lines, args.timeout, cluster.broker_pids())
                results.append(result)
                print(
                    f"run {run + 1}: {args.lines / result['elapsed']:,.0f} lines/s, "
                    f"{len(data) / result['elapsed'] / 1e6:.1f} MB/s, "
                    f"{result['cpu'] / args.lines * 100_000:.2f} CPU s per 100k lines, "
                    f"peak RSS {result['rss']:.0f} MiB, broker CPU {result['broker_cpu']:.2f}s "
                    f"(append took {result['written']:.2f}s; "
                    f"agent process CPU over its life {result['life_cpu']:.2f}s)",
                    flush=True,
                )
    elapsed = statistics.median(r["elapsed"] for r in results)
    cpu = statistics.median(r["cpu"] for r in results)
    mbs = len(data) / elapsed / 1e6
    print(f"\nagent throughput, {args.lines:,} lines of {LINE_BYTES} bytes, median of {args.runs}:")
    print(f"  {args.lines / elapsed:,.0f} lines/s")
    print(f"  {mbs:.1f} MB/s of log lines (target >= 50)")
    print(f"  {cpu / args.lines * 100_000:.2f} CPU seconds per 100,000 lines (agent process)")
    print(f"  machine: {os.cpu_count()} cores, shared; figures are provisional")
    return 0


if __name__ == "__main__":
    sys.exit(main())
