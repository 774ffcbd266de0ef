"""The WAN between the datacenters cut under the agent and the mirror, combined with kill -9
and SIGSTOP (issue 37's pipeline nemeses; tests/support/pipeline_nemesis.py).

Each nemesis runs a real agent tailing three files of loghub lines on the live side and
a real offset-preserving mirror copying to the analysis datacenter, cuts the WAN (10 s
here, past the 6 s ZooKeeper sessions; 60 s in ``scripts/nemesis.sh``) while a topic
appears on the live side, and during the cut kills or freezes one of them; after the
heal every line written must be on the analysis cluster once, in order, the copy the
live one byte for byte, the mirror must never have exited by itself and must resume
within 10 s of the WAN's return. The two datacenters (two ZooKeepers, three brokers, a
router) are built once for the module.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import AgentProcess, agent_process  # noqa: F401 - a fixture
from tests.mirror.conftest import MirrorProcess
from tests.support.nemesis import MARKS
from tests.support.network import TestNetwork
from tests.support.pipeline_nemesis import (
    Datacenters,
    Pipeline,
    assert_pipeline_sound,
    pipeline,
    run_pipeline_nemesis,
    two_datacenters,
)

pytestmark = [*MARKS, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def datacenters(module_test_network: TestNetwork) -> Iterator[Datacenters]:
    dc = two_datacenters(module_test_network)
    yield dc


@pytest.fixture
def make_pipeline(
    datacenters: Datacenters,
    tmp_path: Path,
    agent_process: Callable[[dict[str, Any]], AgentProcess],  # noqa: F811 - the fixture imported above
    mirrors: Callable[..., MirrorProcess],
) -> Callable[[str], Pipeline]:
    def make(name: str) -> Pipeline:
        for broker in datacenters.live.values():  # an earlier nemesis that failed midway
            if not broker.is_running():
                broker.start()
        return pipeline(datacenters, name, tmp_path, agent_process, mirrors)

    return make


def at(cut_at: float, seconds: float) -> None:
    """Sleep until ``seconds`` into the cut."""
    time.sleep(max(0.0, cut_at + seconds - time.monotonic()))


def test_wan_cut_with_the_mirror_killed_and_restarted_during_it(make_pipeline: Callable[[str], Pipeline]) -> None:
    def during(pipe: Pipeline, cut_at: float, hold_s: float) -> str:
        at(cut_at, 0.2 * hold_s)
        pipe.kill_mirror()
        at(cut_at, 0.5 * hold_s)
        pipe.start_mirror()  # the analysis side still away: it must wait for it, not exit
        at(cut_at, 0.8 * hold_s)
        pipe.check_mirror()
        return f"mirror killed -9 {0.2 * hold_s:.0f}s into the cut, started again at {0.5 * hold_s:.0f}s"

    pipe = make_pipeline("WAN cut, mirror killed")
    assert_pipeline_sound(pipe, run_pipeline_nemesis(pipe, during))


def test_wan_cut_with_the_mirror_frozen_during_it(make_pipeline: Callable[[str], Pipeline]) -> None:
    def during(pipe: Pipeline, cut_at: float, hold_s: float) -> str:
        at(cut_at, 0.1 * hold_s)
        pipe.signal_mirror(signal.SIGSTOP)  # longer than its 4 s group session: the group drops it
        at(cut_at, 0.7 * hold_s)
        pipe.signal_mirror(signal.SIGCONT)
        return f"mirror frozen (SIGSTOP) {0.1 * hold_s:.0f}-{0.7 * hold_s:.0f}s into the cut"

    pipe = make_pipeline("WAN cut, mirror frozen")
    assert_pipeline_sound(pipe, run_pipeline_nemesis(pipe, during))


def test_wan_cut_with_the_agent_frozen_then_killed_during_it(make_pipeline: Callable[[str], Pipeline]) -> None:
    def during(pipe: Pipeline, cut_at: float, hold_s: float) -> str:
        at(cut_at, 0.1 * hold_s)
        pipe.signal_agent(signal.SIGSTOP)
        at(cut_at, 0.4 * hold_s)
        pipe.signal_agent(signal.SIGCONT)
        at(cut_at, 0.6 * hold_s)
        assert pipe.agent is not None
        pipe.agent.kill()
        pipe.start_agent()  # resumes after what the live cluster holds
        return (
            f"agent frozen (SIGSTOP) {0.1 * hold_s:.0f}-{0.4 * hold_s:.0f}s into the cut, "
            f"killed -9 and started again at {0.6 * hold_s:.0f}s"
        )

    pipe = make_pipeline("WAN cut, agent frozen and killed")
    assert_pipeline_sound(pipe, run_pipeline_nemesis(pipe, during))


def test_wan_cut_with_the_mirrors_source_leader_killed_during_it(make_pipeline: Callable[[str], Pipeline]) -> None:
    killed: list[int] = []

    def during(pipe: Pipeline, cut_at: float, hold_s: float) -> str:
        leader = pipe.source_leader()
        at(cut_at, 0.2 * hold_s)
        pipe.dc.live[leader].kill()
        killed.append(leader)
        return f"live broker {leader} (the source leader) killed -9 {0.2 * hold_s:.0f}s into the cut"

    def heal(pipe: Pipeline) -> str:
        for broker_id in killed:
            pipe.dc.live[broker_id].start()
        return f"broker {killed} started again after the heal"

    pipe = make_pipeline("WAN cut, source leader killed")
    assert_pipeline_sound(pipe, run_pipeline_nemesis(pipe, during, heal))
