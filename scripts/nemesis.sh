#!/usr/bin/env bash
# The nemesis tests of issue 37 (tests/replication/test_nemesis_*.py, each once per run,
# or those PYTEST_ARGS name): brokers, ZooKeeper
# and the workload on hosts of the test network (docs/testing.md), a fault held for a
# bounded time, then the checker's counts. Each run lasts about half a minute, too long
# for `make test`: they run when LOGFERRY_NEMESIS=1, which this script sets. Needs root.
# Each nemesis prints its verdict line (acknowledged, lost, duplicates, order, divergent
# replicas, seconds unavailable per partition); the script stops at the first failure
# and prints its output's tail (every run's whole output, and the brokers' logs of each
# nemesis, stay in /tmp/logferry-nemesis.*).
#
#   scripts/nemesis.sh [RUNS] [PYTEST_ARGS...]     RUNS: how many times (default 1)
#   scripts/nemesis.sh 3 -k zookeeper              only the nemeses whose name has "zookeeper"
#   LOGFERRY_NEMESIS_FAULT_S=16 scripts/nemesis.sh  the fault held 16 s instead of 10
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${1:-1}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
shift || true
cd "$REPO"
LOGS=$(mktemp -d /tmp/logferry-nemesis.XXXXXX)
for run in $(seq "$RUNS"); do
    log="$LOGS/run-$run.log"
    mkdir -p "$LOGS/run-$run"
    if LOGFERRY_NEMESIS=1 LOGFERRY_NEMESIS_LOGS="$LOGS/run-$run" "$PYTHON" -m pytest -n 0 -p no:cacheprovider -q -s \
        tests/replication/test_nemesis_*.py "$@" >"$log" 2>&1; then
        grep -E '^verdict: ' "$log" | sed "s/^verdict: /run $run: /" || echo "run $run: no verdict line"
    else
        tail -n 60 "$log"
        echo "run $run failed; its whole output: $log" >&2
        exit 1
    fi
done
echo "outputs: $LOGS"
