"""Development harness: a local ZooKeeper (Debian's, as a JVM subprocess) and local
broker processes, used by the tests, the benchmarks and the demo."""
