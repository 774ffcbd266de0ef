# logferry's entry points. CI runs `make test` (see .ci/run).
#
#   make test [PYTEST_ARGS="-k expire -x"]   lint, then unit + integration tests (real ZooKeeper)
#   make test-unit [PYTEST_ARGS=...]          the tests that start no process (under a minute)
#   make lint                                 ruff, mypy and the import contracts (pyproject.toml)
#   make demo [DEMO_ARGS=...]                 the end-to-end demo (its own HDFS; DEMO_ARGS="--lake file": no HDFS)
#   make bench [BENCH_ARGS=--quick]           benchmarks/run_all.py: every benchmark, in turn
#   make venv | system-deps | class-archive | kafka-jars | hadoop-jars | iceberg-jars | clean | distclean
#
# `venv` reinstalls only when pyproject.toml changes (stamp file inside .venv);
# `system-deps` installs Java and Debian's ZooKeeper if missing (root), or says how.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
STAMP := $(VENV)/.logferry-installed
PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=

# Python caches compiled modules in __pycache__ (git-ignored; `make clean` removes it),
# also where the environment says not to (PYTHONDONTWRITEBYTECODE, which some machines
# set). A test run starts hundreds of broker, agent and CLI processes, and without the
# cache each compiles every module it imports again (0.9 s of CPU to import the broker,
# 0.5 s with it); each pytest worker compiles and rewrites every test module (collection
# 17.6 s of CPU, 4.5 s with it). Measured on this project's 2-core machine.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv system-deps class-archive kafka-jars hadoop-jars iceberg-jars jars lint test test-prerequisites test-unit demo bench clean distclean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/make-venv.sh
	@scripts/make-venv.sh

system-deps:
	@scripts/install-system-deps.sh

# Spark's class archive (broker/testing/class_archive.py): one small Spark job, once per
# JVM and Spark version, in ~/.cache/logferry/jvm ($$LOGFERRY_JVM_CACHE); then each Spark
# JVM of the tests and the demo starts on about half the CPU (19 -> 10 s measured).
class-archive: venv system-deps
	@$(VENV)/bin/python -m broker.testing.class_archive

# Apache Kafka's jars from Maven Central (scripts/install-kafka-jars.sh) into
# benchmarks/.cache/ (git-ignored): the Java clients and tools tests/integration/
# test_kafka_java.py runs against the Kafka listener. No mvn run when they are there;
# without Maven Central it says so in one line and those tests skip with that line.
kafka-jars:
	@scripts/install-kafka-jars.sh

# Apache Hadoop's NameNode and DataNode (scripts/install-jars.sh apache-hadoop), the same
# way and into the same cache: `logferry hdfs start` and the loader's tests on a real HDFS
# (tests/loader/test_hdfs_integration.py) run them; without them those tests skip saying why.
hadoop-jars:
	@scripts/install-jars.sh apache-hadoop

# Apache Iceberg's Spark runtime (scripts/install-jars.sh apache-iceberg, pom in
# scripts/jars/apache-iceberg/), the same way and into the same cache: the loader's
# `format = "iceberg"` runs with it on Spark's classpath (spark.jars), as its tests
# (tests/loader/test_iceberg_integration.py) do; without it those tests skip saying why.
iceberg-jars:
	@scripts/install-jars.sh apache-iceberg

# The guard rails: style, formatting and real mistakes (ruff), types of the typed packages (mypy)
# and the architecture contracts (import-linter). Configured in pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# On several workers (pytest-xdist, tests/support/parallel.py); PYTEST_ARGS="-n 0" for one.
test:
	@$(MAKE) --no-print-directory -j4 --output-sync=line test-prerequisites
	$(VENV)/bin/pytest -n auto $(PYTEST_ARGS)

# What the tests need, made in parallel where the order allows: the virtualenv (pip) beside
# the system packages (apt) and then the jars (Maven, one set after the other: they share
# ~/.m2); lint beside the class archive's Spark job. On a fresh machine the three downloads
# are minutes each; in a row they were most of a clean clone's first `make test`.
test-prerequisites: venv system-deps lint class-archive jars

jars: system-deps
	@scripts/install-kafka-jars.sh
	@scripts/install-jars.sh apache-hadoop
	@scripts/install-jars.sh apache-iceberg

# Tests marked `integration` start processes (ZooKeeper, brokers, Spark, subprocesses);
# the rest need neither Java nor free ports.
test-unit: venv
	$(VENV)/bin/pytest -n auto -m "not integration" $(PYTEST_ARGS)

# The demo lands into its own HDFS as an Iceberg table per topic (docs: README, "The demo"):
# Hadoop's jars run the NameNode and DataNode, Iceberg's Spark runtime the loader's tables.
# Without them the demo says so in one line; DEMO_ARGS="--lake file" needs neither.
demo: venv system-deps class-archive hadoop-jars iceberg-jars
	$(VENV)/bin/logferry demo $(DEMO_ARGS)

bench: venv system-deps
	$(VENV)/bin/python benchmarks/run_all.py $(BENCH_ARGS)

# Generated files only; keeps .venv (slow to rebuild) and .logferry/ (a local
# ZooKeeper's data: stop it with `logferry zk stop` first, then remove by hand).
clean:
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache .import_linter_cache build dist *.egg-info \
		spark-warehouse metastore_db derby.log

distclean: clean
	rm -rf $(VENV)
