#!/usr/bin/env bash
# Install what benchmarks/paper_experiment.py compares logferry against: Debian's
# rabbitmq-server and activemq (the paper's peers), nats-server and redis-server (modern
# peers), and the `bench` extra of pyproject.toml (pika, stomp.py, nats-py,
# redis[hiredis], matplotlib) into the project's virtualenv; and for benchmarks/vs_kafka.py
# Apache Kafka's jars from Maven Central (scripts/install-kafka-jars.sh: Debian's maven,
# which brings a Java along, resolves benchmarks/peers/apache-kafka/pom.xml into
# benchmarks/.cache/, git-ignored; LOGFERRY_BENCH_CACHE=/elsewhere to keep them outside
# the clone).
#
# The experiment installs whatever is missing by itself; this script is for doing it
# ahead of time (CI images, machines where the run itself must not touch apt).
# Idempotent: present packages are left alone. Not root: the apt part is skipped with
# the command to run as root, the pip part still runs, and the exit code is 1.
# The packages' maintainer scripts may start system services on hosts with an init
# system; the benchmark never uses them (it runs private instances on free ports).
#
#   scripts/install-bench-deps.sh            PYTHON=/path/to/python to pick another env
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
PACKAGES=(rabbitmq-server activemq nats-server redis-server maven)
# A file each package ships: present means installed (dpkg may list removed ones).
PROBES=(/usr/lib/rabbitmq/bin/rabbitmq-server /usr/share/activemq/bin/activemq.jar
        /usr/sbin/nats-server /usr/bin/redis-server /usr/bin/mvn)
status=0

missing=()
for i in "${!PACKAGES[@]}"; do
    [[ -e "${PROBES[$i]}" ]] || missing+=("${PACKAGES[$i]}")
done

if (( ${#missing[@]} > 0 )); then
    install_cmd="apt-get install -y --no-install-recommends ${missing[*]}"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-bench-deps: missing ${missing[*]} and no apt-get here: install them by hand; the experiment will skip them" >&2
        status=1
    elif (( EUID != 0 )); then
        echo "install-bench-deps: missing ${missing[*]}; run as root: sudo apt-get update && sudo ${install_cmd}" >&2
        status=1
    else
        echo "install-bench-deps: installing ${missing[*]} with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        # shellcheck disable=SC2086
        if ! apt-get install -y -qq --no-install-recommends ${missing[*]} </dev/null; then
            apt-get update -qq
            # shellcheck disable=SC2086
            apt-get install -y -qq --no-install-recommends ${missing[*]} </dev/null
        fi
    fi
fi

if [[ ! -x "$PYTHON" ]]; then
    echo "install-bench-deps: no Python at $PYTHON (make venv first, or set PYTHON=...)" >&2
    exit 1
fi
# The requirement strings of the bench extra, one per line, ranges included.
mapfile -t requirements < <("$PYTHON" - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as fh:
    print("\n".join(tomllib.load(fh)["project"]["optional-dependencies"]["bench"]))
EOF
)
"$PYTHON" -m pip install --quiet "${requirements[@]}"

# Apache Kafka's jars (the broker and tools benchmarks/vs_kafka.py runs): the same
# script `make test` runs for the Java clients' tests; quick when they are there.
KAFKA_JARS_REQUIRED=1 "$REPO/scripts/install-kafka-jars.sh" || status=1
exit "$status"
