"""Exactly once across crashes: kill the job at each step, rerun, count.

Each crashing run is a real ``python -m hadoop_loader load`` process that dies with
``os._exit`` at an injected point (``LOGFERRY_LOADER_CRASH_AT``, see
``hadoop_loader/crash.py``), as kill -9 would: no cleanup, the lock left behind. New
messages are produced between runs, so every run has data in flight when it dies.
Crashes inside publishing hit recovery's roll-forward of the committed run, which
runs before Spark starts. A final clean run (in this process) must then show every
message exactly once.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hadoop_loader.crash import CRASH_EXIT, ENV
from hadoop_loader.fs import LocalFileSystem
from hadoop_loader.job import run_load
from hadoop_loader.store import LandingStore
from tests.loader.conftest import REPO, loader_command, loader_config, produce, write_loader_toml
from tests.loader.test_load_integration import assert_landed_exactly, merge

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]  # five Spark jobs in their own processes


def crashing_run(config: Path, point: str) -> subprocess.CompletedProcess:
    argv, env = loader_command(config)
    env[ENV] = point
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def published(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*.parquet") if "_logferry" not in p.parts)


def test_crash_at_each_step_then_rerun_lands_exactly_once(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    out = tmp_path / "wh"
    config_file = tmp_path / "loader.toml"
    write_loader_toml(config_file, zk, out, ["crash-a", "crash-b"])
    store = LandingStore(LocalFileSystem(), out.as_uri())
    sent: dict = {}
    produced = {"crash-a": 0, "crash-b": 0}

    def more(n: int) -> None:
        batch = {
            "crash-a": produce(zk, "crash-a", 3, n, start=produced["crash-a"], hours=2),
            "crash-b": produce(zk, "crash-b", 1, n // 2, start=produced["crash-b"]),
        }
        produced["crash-a"] += n
        produced["crash-b"] += n // 2
        merge(sent, batch)

    def crash(point: str) -> None:
        import time

        t = time.monotonic()
        result = crashing_run(config_file, point)
        print(f"{point}: {time.monotonic() - t:.1f}s")
        assert result.returncode == CRASH_EXIT, (
            f"{point}: exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
        )
        assert f"injected crash at {point}" in result.stderr

    more(40_000)
    crash("during-write")
    assert store.committed() == [] and published(out) == []
    crash("after-write")  # staged and counted, not committed
    assert store.committed() == [] and published(out) == []
    assert store.fs.list_names(store.staging) == ["00000000000000000001"]
    crash("after-commit")  # run 1 commits 40,000 + 20,000 messages; nothing published
    assert store.committed() == [1] and published(out) == []
    run1 = len(store.read_manifest(1).files)
    assert run1 > 1

    more(10_000)
    crash("during-publish")  # recovery moves one file of run 1, then dies
    assert store.committed() == [1] and len(published(out)) == 1
    crash("after-publish")  # recovery moves the rest of run 1; staging is left behind
    assert store.committed() == [1] and len(published(out)) == run1
    assert store.fs.list_names(store.staging) == ["00000000000000000001"]

    more(5_000)
    config = loader_config(zk, out, ["crash-a", "crash-b"], load={"chunk_bytes": 262144})
    final = run_load(config, spark=spark)
    assert final.recovery.rolled_forward == [1] and final.recovery.files_moved == 0
    assert final.sequence == 2 and final.rows == 15_000 + 7_500
    assert store.fs.list_names(store.staging) == []
    assert_landed_exactly(out, sent)
    manifests = [store.read_manifest(s) for s in store.committed()]
    assert sum(m.rows for m in manifests) == sum(produced.values())
