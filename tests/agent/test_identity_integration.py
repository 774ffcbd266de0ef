"""The de-duplication recipe of docs/operations.md ("Duplicates") on a real agent's records.

A real ``python -m agent`` against a real broker tails one path through two rename
rotations and a copytruncate, and is killed with SIGKILL long after its last checkpoint
so its restart sends lines again. The records are read back and decoded as the loader
decodes them, and the two SQL queries of the docs run on them as written (SQLite):
keeping one row per ``(host, file_id, file_offset)`` leaves exactly the lines written,
each once, while the old advice ``(host, file, file_offset)`` deletes real lines (the
four files share the path and their offsets).
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from hadoop_loader import agent_records
from tests.agent.conftest import REPO, NumberedLog, consume, wait_until
from tests.agent.test_integration import _wait_shipped, base_doc

pytestmark = pytest.mark.integration


def documented_queries() -> list[str]:
    """The SQL blocks of docs/operations.md's "Duplicates" section: recipe, then count."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("\n## Duplicates\n", 1)[1].split("\n## ", 1)[0]
    queries = re.findall(r"```sql\n(.*?)```", section, re.S)
    assert len(queries) == 2, queries
    return queries


def landed_table(bootstrap: list[str], topic: str) -> sqlite3.Connection:
    """Every message of ``topic`` decoded into the loader's agent columns, as table ``logs``."""
    values = [message.value for _, message, _ in consume(bootstrap, topic)]
    fields, decoded, undecodable = agent_records.decode_values(values)
    assert undecodable == 0
    columns = [f.column for f in agent_records.AGENT_FIELDS]
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE logs ({', '.join(columns)})")
    rows = zip(*(array.to_pylist() for array in fields), strict=True)
    db.executemany(f"INSERT INTO logs VALUES ({', '.join('?' * len(columns))})", rows)
    return db


def test_dedup_on_file_id_removes_exactly_the_resent_lines(broker_cluster, agent_process, tmp_path: Path) -> None:
    cluster = broker_cluster(1)
    # No periodic checkpoint: a kill -9 then re-sends everything acknowledged since the
    # last checkpoint write (the agent writes one for each new file it meets), when the
    # agent does not look up what the cluster holds (test_resume_integration.py does).
    doc = base_doc(tmp_path, cluster.bootstrap, checkpoint_interval_s=600.0, resume_from_cluster=False)
    numbered = NumberedLog(tmp_path / "logs" / "app.log")
    log, write = numbered.path, numbered.write

    agent = agent_process(doc).start()
    write(2000)
    _wait_shipped(agent, acked=numbered.written)
    os.rename(log, log.with_name("app.log.1"))  # rename rotation (not matched by *.log)
    write(2000)
    _wait_shipped(agent, acked=numbered.written)
    shutil.copyfile(log, log.with_name("app.log.copy"))  # copytruncate, after a quiet moment
    os.truncate(log, 0)
    wait_until(lambda: agent.counter("truncations") >= 1, 30, "truncation seen")
    write(2000)
    _wait_shipped(agent, acked=numbered.written)
    agent.kill()  # acked since the last checkpoint: sent again
    write(500)
    os.rename(log, log.with_name("app.log.2"))  # rotated while the agent is down
    write(1500)
    restarted = agent_process(doc).start()
    write(500)
    _wait_shipped(restarted, 60)
    assert restarted.terminate() == 0

    recipe, count_duplicates = documented_queries()
    db = landed_table(cluster.bootstrap, "app")
    records = db.execute("SELECT count(*) FROM logs").fetchone()[0]
    all_lines = set(numbered.expected())
    assert {line for (line,) in db.execute("SELECT line FROM logs")} == all_lines
    assert records > numbered.written, "the restart sent nothing again: the test shows nothing"
    assert db.execute("SELECT DISTINCT file FROM logs").fetchall() == [(str(log),)]
    assert db.execute("SELECT count(*) FROM logs WHERE file_id IS NULL").fetchone()[0] == 0
    # app.log.1; app.log.2 before and after its copytruncate; app.log
    assert db.execute("SELECT count(DISTINCT file_id) FROM logs").fetchone()[0] == 4

    cursor = db.execute(recipe)
    line = [d[0] for d in cursor.description].index("line")
    kept = [row[line] for row in cursor]
    assert len(kept) == numbered.written, f"{numbered.written} lines written, {len(kept)} kept"
    assert sorted(kept) == sorted(all_lines)
    assert db.execute(count_duplicates).fetchone()[0] == records - numbered.written

    old_advice = db.execute("SELECT count(*) FROM (SELECT DISTINCT host, file, file_offset FROM logs)").fetchone()[0]
    assert old_advice < numbered.written  # de-duplicating on the path deletes real lines
    print(
        f"lines written {numbered.written}, records {records} ({records - numbered.written} sent again), "
        f"kept by the recipe {len(kept)}, by (host, file, file_offset) {old_advice}"
    )
