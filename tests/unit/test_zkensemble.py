"""The local ensemble's layout (broker/testing/zkensemble.py), without Java."""

from __future__ import annotations

import pytest

from broker.common.errors import ZooKeeperError
from broker.testing.zkensemble import LocalEnsemble, member_hosts
from broker.testing.zkserver import read_cfg


def test_members_get_loopback_addresses_of_their_own():
    assert member_hosts("127.0.0", 3) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    for bad in ("10.0.0", "127.0", "127.0.0.1", "not an address", "::1"):
        with pytest.raises(ZooKeeperError, match="127.x.y"):
            member_hosts(bad, 3)


def test_an_ensemble_is_odd_and_each_member_names_every_peer(tmp_path):
    with pytest.raises(ZooKeeperError, match="3 or 5 members, not 4"):
        LocalEnsemble(tmp_path, 2181, 4)
    ensemble = LocalEnsemble(tmp_path, 2181, 3, "127.9.8")
    assert ensemble.hosts == "127.9.8.1:2181,127.9.8.2:2181,127.9.8.3:2181"
    assert ensemble.majority == 2
    for member in ensemble.members:
        member.write_config()
    cfg = read_cfg(tmp_path / "member-2" / "zoo.cfg")
    assert (cfg["clientPortAddress"], cfg["clientPort"]) == ("127.9.8.2", "2181")
    assert [cfg[f"server.{i}"] for i in (1, 2, 3)] == [f"127.9.8.{i}:2888:3888" for i in (1, 2, 3)]
    assert (tmp_path / "member-2" / "myid").read_text().strip() == "2"

    found = LocalEnsemble.from_data_dir(tmp_path)
    assert found is not None and found.hosts == ensemble.hosts
    assert LocalEnsemble.from_data_dir(tmp_path / "empty") is None
