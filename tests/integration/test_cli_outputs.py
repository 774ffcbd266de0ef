"""The CLI against real brokers: a produce that could not deliver says so and exits 1;
a group consume prints messages, not the group's INFO rebalance lines. The tests that
use only their own topics and groups share the module's broker (``module_cluster``)."""

from __future__ import annotations

import signal

import pytest

from tests.support.cli import logferry

pytestmark = pytest.mark.integration


_cli = logferry


def test_produce_that_cannot_deliver_says_how_many_and_exits_1(broker_cluster):
    # The broker refuses any frame over 4 KiB (a metadata request fits, the batch does not).
    cluster = broker_cluster(1, broker={"max_request_bytes": 4096})
    zk = cluster.zk_connect
    assert _cli("topic", "create", "small", "-p", "1", zk=zk).returncode == 0
    lines = "".join(f"{i:05d} " + "x" * 100 + "\n" for i in range(200))
    produced = _cli("produce", "small", "--delivery-timeout", "3", zk=zk, stdin=lines)
    assert produced.returncode == 1, produced.stderr
    last = produced.stderr.strip().splitlines()[-1]
    assert last.startswith("logferry produce: error: 200 of 200 messages to small were not delivered: "), (
        produced.stderr
    )
    assert "produced 200" not in produced.stderr and "Traceback" not in produced.stderr
    # and what fits is delivered, and said so
    ok = _cli("produce", "small", zk=zk, stdin="short\n")
    assert ok.returncode == 0 and "produced 1 messages to small" in ok.stderr, ok.stderr


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_produce_with_a_codec_then_consume_in_order(module_cluster, unique_name, codec):
    zk = module_cluster.zk_connect
    packed = unique_name("packed")
    assert _cli("topic", "create", packed, "-p", "1", zk=zk).returncode == 0
    lines = [f"2026-11-24 line {i} GET /index.html 200" for i in range(500)]
    produced = _cli("produce", packed, "--compression", codec, zk=zk, stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _cli("consume", packed, "-n", "500", zk=zk)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines


def test_group_consume_prints_messages_without_info_logs(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    quiet = unique_name("quiet")
    assert _cli("topic", "create", quiet, "-p", "2", zk=zk).returncode == 0
    lines = [f"line {i}" for i in range(20)]
    assert _cli("produce", quiet, zk=zk, stdin="\n".join(lines) + "\n").returncode == 0
    consumed = _cli("consume", quiet, "--group", unique_name("g"), "-n", "20", zk=zk)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)
    assert " INFO " not in consumed.stderr, consumed.stderr  # WARNING by default
    verbose = _cli("consume", quiet, "--group", unique_name("h"), "-n", "20", "-v", zk=zk)
    assert verbose.returncode == 0 and " INFO " in verbose.stderr, verbose.stderr


def test_services_exit_130_after_ctrl_c_and_0_after_sigterm(broker_cluster):
    cluster = broker_cluster(2)
    interrupted, terminated = cluster.brokers
    interrupted.proc.send_signal(signal.SIGINT)  # Ctrl-C: stops cleanly, then 130
    assert interrupted.proc.wait(30) == 130, interrupted.log_tail()
    assert terminated.stop() == 0, terminated.log_tail()
