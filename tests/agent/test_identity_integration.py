"""The de-duplication recipe of docs/operations.md ("Duplicates") on a real agent's records.

A real ``python -m agent`` against a real broker tails one path through two rename
rotations and a copytruncate, and is killed with SIGKILL long after its last checkpoint
so its restart sends lines again. The records are read back and decoded as the loader
decodes them; keeping one row per ``(host, file_id, file_offset)`` leaves exactly the
lines written, each once, while the old recipe ``(host, file, file_offset)`` deletes
real lines (the three files share the path and their offsets).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from hadoop_loader import agent_records
from tests.agent.conftest import consume, wait_until
from tests.agent.test_integration import _wait_shipped, base_doc

pytestmark = pytest.mark.integration


def _decoded_table(bootstrap: list[str], topic: str) -> pa.Table:
    """Every message of ``topic`` decoded into the loader's agent columns."""
    values = [message.value for _, message, _ in consume(bootstrap, topic)]
    fields, decoded, undecodable = agent_records.decode_values(values)
    assert undecodable == 0
    names = [f.column for f in agent_records.AGENT_FIELDS]
    return pa.Table.from_arrays(fields + [decoded], names=names + ["decoded"])


def _distinct(table: pa.Table, keys: list[str]) -> pa.Table:
    """The recipe: one row per key (here: the first of each group, as the docs' SQL keeps
    the earliest read)."""
    indexed = table.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(keys, use_threads=False).aggregate([("row", "min")])
    return table.take(first.column("row_min"))


def test_dedup_on_file_id_removes_exactly_the_resent_lines(broker_cluster, agent_process,
                                                           tmp_path: Path) -> None:
    cluster = broker_cluster(1)
    # No periodic checkpoint: a kill -9 then re-sends everything acknowledged since the
    # last checkpoint write (the agent writes one for each new file it meets).
    doc = base_doc(tmp_path, cluster.bootstrap, checkpoint_interval_s=600.0)
    log = tmp_path / "logs" / "app.log"
    written = 0

    def write(n: int) -> None:
        nonlocal written
        with open(log, "ab") as handle:
            handle.write(b"".join(b"line %07d of the test log\n" % (written + i)
                                  for i in range(n)))
        written += n

    agent = agent_process(doc).start()
    write(2000)
    _wait_shipped(agent, acked=written)
    os.rename(log, log.with_name("app.log.1"))       # rename rotation (not matched by *.log)
    write(2000)
    _wait_shipped(agent, acked=written)
    shutil.copyfile(log, log.with_name("app.log.copy"))  # copytruncate, after a quiet moment
    os.truncate(log, 0)
    wait_until(lambda: agent.counter("truncations") >= 1, 30, "truncation seen")
    write(2000)
    _wait_shipped(agent, acked=written)
    agent.kill()                                      # acked since the last checkpoint: sent again
    write(500)
    os.rename(log, log.with_name("app.log.2"))       # rotated while the agent is down
    write(1500)
    restarted = agent_process(doc).start()
    write(500)
    _wait_shipped(restarted, 60)
    assert restarted.terminate() == 0

    table = _decoded_table(cluster.bootstrap, "app")
    lines = table.column("line").to_pylist()
    assert set(lines) == {"line %07d of the test log" % i for i in range(written)}
    duplicates = table.num_rows - written
    assert duplicates > 0, "the restart sent nothing again: the test shows nothing"
    assert table.column("file").unique().to_pylist() == [str(log)]
    assert table.column("file_id").null_count == 0
    assert len(table.column("file_id").unique()) == 4   # app.log.1, app.log.2 before and after its
    # copytruncate, and app.log

    kept = _distinct(table, ["host", "file_id", "file_offset"])
    assert kept.num_rows == written, f"{written} lines written, {kept.num_rows} kept"
    assert sorted(kept.column("line").to_pylist()) == sorted(set(lines))

    old_recipe = _distinct(table, ["host", "file", "file_offset"])
    assert old_recipe.num_rows < written   # the old advice deletes real lines
    print(f"lines written {written}, records {table.num_rows} ({duplicates} sent again), "
          f"after (host, file_id, file_offset) {kept.num_rows}, after (host, file, "
          f"file_offset) {old_recipe.num_rows}")
