#!/usr/bin/env bash
# The long nemesis suite of issue 37: every nemesis (tests/replication/test_nemesis_*.py
# and the pipeline nemeses, tests/mirror/test_nemesis_*.py, or those PYTEST_ARGS name)
# RUNS times, with random timing. `make test` runs each once with fixed timing (the
# fault once 2,000 messages are acknowledged, held 10 s); here each run draws, per
# nemesis, when the fault starts (0-8 s later) and how long it holds (2-20 s: under the
# 6 s session to over three; the pipeline nemeses cut the WAN for the issue's 60 s,
# tests/support/pipeline_nemesis.py) from a seed, printed, so a failure is
# replayed with the seed and `-k` (tests/support/nemesis.py: timing). Brokers, ZooKeeper
# and the workload run on hosts of the test network (docs/testing.md). Needs root.
#
# Every run goes to the end, failed or not; each nemesis prints its verdict line
# (acknowledged, lost, duplicates, order, divergent replicas, seconds unavailable per
# partition); at the end, the results table (tests/support/nemesis_report.py), the one
# docs/guarantees.md shows. Every run's output, its junit.xml and verdicts.jsonl, and
# the brokers' logs of each nemesis stay in /tmp/logferry-nemesis.*. Exit status 1 if
# any nemesis failed.
#
#   scripts/nemesis.sh [RUNS] [PYTEST_ARGS...]      RUNS: how many times (default 1)
#   scripts/nemesis.sh 5                            the long suite: each nemesis 5 times
#   scripts/nemesis.sh 3 -k zookeeper               only the nemeses whose name has "zookeeper"
#   LOGFERRY_NEMESIS_SEED=123 scripts/nemesis.sh 1 -k isolated   replay a run's timing
#   LOGFERRY_NEMESIS_FAULT_S=16 scripts/nemesis.sh  every fault held 16 s (its start still drawn)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${1:-1}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
shift || true
cd "$REPO"
LOGS=$(mktemp -d /tmp/logferry-nemesis.XXXXXX)
echo "outputs: $LOGS"
failed=0
for run in $(seq "$RUNS"); do
    out="$LOGS/run-$run"
    mkdir -p "$out"
    seed=${LOGFERRY_NEMESIS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
    echo "$seed" >"$out/seed"
    echo "run $run: seed $seed"
    if LOGFERRY_NEMESIS_SEED=$seed LOGFERRY_NEMESIS_LOGS="$out" "$PYTHON" -m pytest -n 0 -p no:cacheprovider -q -s \
        --junitxml="$out/junit.xml" tests/replication/test_nemesis_*.py tests/mirror/test_nemesis_*.py "$@" >"$out/pytest.log" 2>&1; then
        :
    else
        failed=1
        echo "run $run failed (seed $seed); its whole output: $out/pytest.log" >&2
        grep -E '^(FAILED|ERROR) ' "$out/pytest.log" >&2 || tail -n 30 "$out/pytest.log" >&2
    fi
    grep -E '^verdict: ' "$out/pytest.log" | sed "s/^verdict: /run $run: /" || echo "run $run: no verdict line"
done
echo
"$PYTHON" -m tests.support.nemesis_report "$LOGS" || true
echo "outputs: $LOGS"
exit "$failed"
