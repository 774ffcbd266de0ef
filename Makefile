# logferry's entry points. CI runs `make test` (see .ci/run).
#
#   make test [PYTEST_ARGS="-k expire -x"]   lint, then unit + integration tests (real ZooKeeper)
#   make test-unit [PYTEST_ARGS=...]          the tests that start no process (under a minute)
#   make lint                                 ruff, mypy and the import contracts (pyproject.toml)
#   make demo [DEMO_ARGS=...]                 the end-to-end demo
#   make bench [BENCH_ARGS=--quick]           benchmarks/run_all.py: every benchmark, in turn
#   make venv | system-deps | clean | distclean
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
# The packages of pyproject.toml (`[tool.setuptools.packages.find]`).
PACKAGES := broker agent mirror hadoop_loader demo console

.PHONY: help venv system-deps bytecode lint test test-unit demo bench clean distclean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/make-venv.sh
	@scripts/make-venv.sh

system-deps:
	@scripts/install-system-deps.sh

# Compile our packages to __pycache__ once (git-ignored; `make clean` removes it). A test
# run starts hundreds of broker, agent and CLI processes; without the cache each compiles
# every module it imports again (about 0.4 s of CPU per process), and under
# PYTHONDONTWRITEBYTECODE, which some machines set, nothing would ever be cached.
# Up-to-date files are skipped, so this costs nothing on the second run.
bytecode: venv
	@$(VENV)/bin/python -m compileall -q $(PACKAGES)

# The guard rails: style, formatting and real mistakes (ruff), types of the typed packages (mypy)
# and the architecture contracts (import-linter). Configured in pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# On several workers (pytest-xdist, tests/support/parallel.py); PYTEST_ARGS="-n 0" for one.
test: venv system-deps bytecode lint
	$(VENV)/bin/pytest -n auto $(PYTEST_ARGS)

# Tests marked `integration` start processes (ZooKeeper, brokers, Spark, subprocesses);
# the rest need neither Java nor free ports.
test-unit: venv bytecode
	$(VENV)/bin/pytest -n auto -m "not integration" $(PYTEST_ARGS)

demo: venv system-deps bytecode
	$(VENV)/bin/logferry demo $(DEMO_ARGS)

bench: venv system-deps bytecode
	$(VENV)/bin/python benchmarks/run_all.py $(BENCH_ARGS)

# Generated files only; keeps .venv (slow to rebuild) and .logferry/ (a local
# ZooKeeper's data: stop it with `logferry zk stop` first, then remove by hand).
clean:
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache .import_linter_cache build dist *.egg-info \
		spark-warehouse metastore_db derby.log

distclean: clean
	rm -rf $(VENV)
