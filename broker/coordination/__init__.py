"""ZooKeeper: the paths and helpers (zk) and the broker registry."""
