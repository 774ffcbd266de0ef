"""LogManager: log dirs, the clean-shutdown marker and partition placement."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.common.errors import ConfigError, StorageError
from broker.storage.config import LogConfig
from broker.storage.log_manager import LogManager
from broker.storage.segment import segment_file_name
from broker.wire import records

MARKER = ".clean_shutdown"


def batch(i: int) -> bytes:
    return records.encode_batch([b"value %d" % i] * 3, None, 1000 + i)


def manager(*dirs: Path) -> LogManager:
    logs = LogManager(list(dirs), LogConfig())
    logs.load()
    return logs


def test_create_get_remove_and_listings(tmp_path: Path) -> None:
    logs = manager(tmp_path / "a")
    assert logs.get("t", 0) is None and list(logs.logs()) == [] and logs.topics() == set()
    plog = logs.create("t", 0)
    assert logs.create("t", 0) is plog and logs.get("t", 0) is plog
    logs.create("t", 1)
    logs.create("u", 0)
    assert sorted(key for key, _ in logs.logs()) == [("t", 0), ("t", 1), ("u", 0)]
    assert logs.topics() == {"t", "u"}
    assert plog.directory == tmp_path / "a" / "t-0"
    logs.remove("t", 0)
    logs.remove("t", 0)  # removing what is not there is a no-op
    assert logs.get("t", 0) is None and not (tmp_path / "a" / "t-0").exists()
    logs.close()


def test_new_partitions_go_to_the_least_used_log_dir(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs = manager(a, b)
    for p in range(5):
        logs.create("t", p)
    assert len(list(a.iterdir())) == 3 and len(list(b.iterdir())) == 2
    logs.close()


def test_reload_after_clean_close_keeps_data_and_skips_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs = manager(a, b)
    for p in range(2):
        logs.create("t", p).append(batch(p), 3)
    logs.close()
    logs.close()  # idempotent
    assert (a / MARKER).exists() and (b / MARKER).exists()
    segment = a / "t-0" / segment_file_name(0)
    with open(segment, "ab") as f:
        f.write(b"junk")  # a clean marker means: trust the files as they are
    with caplog.at_level(logging.INFO, logger="logferry.storage"):
        again = manager(a, b)
    assert not (a / MARKER).exists() and not (b / MARKER).exists()
    assert "truncated" not in caplog.text
    assert again.get("t", 0).end_offset == len(batch(0)) + 4
    assert again.get("t", 1).visible_end == len(batch(1))
    again.close()


def test_load_without_marker_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = manager(tmp_path)
    plog = logs.create("t", 0)
    plog.append(batch(0), 3)
    plog.flush()
    with open(plog.segments[-1].path, "ab") as f:
        f.write(batch(1)[:-5])  # torn by a crash: close() never ran, so no marker
    assert not (tmp_path / MARKER).exists()
    with caplog.at_level(logging.WARNING, logger="logferry.storage"):
        again = manager(tmp_path)
    assert again.get("t", 0).end_offset == len(batch(0))
    assert "cutting" in caplog.text and "t-0" in caplog.text
    again.close()


def test_log_dir_is_created_and_must_be_writable(tmp_path: Path) -> None:
    manager(tmp_path / "new" / "dir").close()
    assert (tmp_path / "new" / "dir").is_dir()
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(ConfigError, match=str(not_a_dir)):
        manager(not_a_dir)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_log_dir_is_a_config_error(tmp_path: Path) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o555)
    with pytest.raises(ConfigError, match="not a writable directory"):
        manager(read_only)


def test_leftovers_and_duplicates(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "t-0.0123abcd.deleted").mkdir(parents=True)  # an interrupted delete
    (a / "not-a-partition").mkdir()
    manager(a).close()
    assert sorted(p.name for p in a.iterdir()) == [MARKER, "not-a-partition"]
    (a / "t-0").mkdir()
    (b / "t-0").mkdir(parents=True)
    with pytest.raises(StorageError, match="two log dirs"):
        manager(a, b)


def test_failed_fsync_stops_writes_and_withholds_the_marker(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs = manager(a, b)
    failing, healthy = logs.create("t", 0), logs.create("t", 1)
    failing.append(batch(0), 3)
    healthy.append(batch(0), 3)
    pending = failing.prepare_flush()
    os.close(pending._fds[0])  # the fsync will fail with EBADF, as a dying disk would fail it
    with caplog.at_level(logging.ERROR, logger="logferry.storage"), pytest.raises(OSError):
        pending.run()
    assert failing.needs_recovery and "fsync failed" in caplog.text
    assert failing.visible_end == 0
    with pytest.raises(StorageError, match="restart the broker"):
        failing.append(batch(1), 3)
    logs.close()
    assert not (a / MARKER).exists() and (b / MARKER).exists()
    again = manager(a, b)  # a's logs are recovered; the appended batch was valid
    assert again.get("t", 0).visible_end == len(batch(0))
    again.close()
