"""The agent after a kill -9: it resumes after what the cluster holds, sending nothing twice.

A real ``python -m agent`` against a real broker (and ZooKeeper) with no periodic
checkpoint (``checkpoint_interval_s`` = 600 s: the only checkpoint is the write-ahead
one of each new file, at offset 0), so when it is killed every acknowledged line lies
after its checkpoint: the case that used to re-send them all. The restart must find
them in the topic, skip them, and ship only the rest: 0 duplicates, 0 missing, in order,
through a rename rotation done while the agent was down.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agent.conftest import NumberedLog, consume
from tests.agent.test_integration import _wait_shipped, base_doc

pytestmark = pytest.mark.integration


def test_kill_9_after_acks_before_the_checkpoint_sends_nothing_twice(
    broker_cluster, agent_process, tmp_path: Path
) -> None:
    cluster = broker_cluster(1)
    doc = base_doc(tmp_path, cluster.bootstrap, checkpoint_interval_s=600.0)
    numbered = NumberedLog(tmp_path / "logs" / "app.log")
    log, write = numbered.path, numbered.write

    agent = agent_process(doc).start()
    write(3000)
    _wait_shipped(agent, acked=numbered.written)
    held = len(consume(cluster.bootstrap, "app"))
    assert held == numbered.written  # acknowledged, on the broker ...
    checkpoint = (agent.state_dir / "checkpoint.json").read_text()
    assert '"offset":0' in checkpoint  # ... and not in the checkpoint
    agent.kill()
    write(500)
    os.rename(log, log.with_name("app.log.1"))  # rotated while the agent is down
    write(700)
    restarted = agent_process(doc).start()
    write(300)
    _wait_shipped(restarted, 60)
    skipped = restarted.counter("resume_skipped")
    assert restarted.terminate() == 0

    lines = [v["line"] for _, _, v in consume(cluster.bootstrap, "app")]
    expected = numbered.expected()
    duplicates = len(lines) - len(set(lines))
    missing = len(set(expected) - set(lines))
    print(
        f"written {numbered.written}, in the topic {len(lines)}, duplicates {duplicates}, "
        f"missing {missing}, skipped at restart {skipped}"
    )
    assert (duplicates, missing) == (0, 0)
    assert lines == expected  # in order (one key: one partition)
    assert skipped == 3000
    log_text = restarted.log_file.read_text()
    assert "the cluster holds lines up to offset" in log_text, log_text[-3000:]
