#!/usr/bin/env bash
# Java jars from Maven Central into a git-ignored cache, one folder per set; never committed.
#
#   scripts/install-jars.sh apache-kafka    Apache Kafka's broker, tools and clients: the peer
#                                           of the benchmarks (benchmarks/vs_kafka.py) and the
#                                           Java clients tests/integration/test_kafka_java.py runs
#   scripts/install-jars.sh apache-kafka-mirrormaker2
#                                           MirrorMaker 2 with the clients and Connect runtime
#                                           it runs on (a version of its own: see its pom), for
#                                           tests/integration/test_kafka_mirrormaker2.py
#   scripts/install-jars.sh apache-hadoop   Apache Hadoop's NameNode and DataNode, run by
#                                           `logferry hdfs start` (broker/testing/hdfs.py)
#   scripts/install-jars.sh apache-iceberg  Apache Iceberg's Spark runtime (one shaded jar),
#                                           for the loader's `format = "iceberg"`
#
# Each set is one pom (only resolved, never built), resolved with Debian's maven into
# benchmarks/.cache/<set>-<version>/ (git-ignored; LOGFERRY_BENCH_CACHE=/elsewhere keeps it
# outside the clone). `make test` runs it for each (targets kafka-jars, hadoop-jars, iceberg-jars).
#
# Idempotent and quick: when the folder's .resolved marker is there, nothing runs (no
# mvn). Otherwise mvn copies every jar into a temporary folder, renamed once complete,
# so a cut-off download is redone, never half used. Without mvn, as root, it installs
# Debian's maven first. When the jars cannot be had (no mvn, Maven Central unreachable)
# it says why in one line, writes that line into <folder>.unavailable (the tests skip
# with it) and exits 0 unless JARS_REQUIRED=1 (or KAFKA_JARS_REQUIRED=1 for Kafka's): a
# machine without Maven Central still runs every other test.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SET=${1:-}
case "$SET" in
    apache-kafka)
        LABEL="Apache Kafka"; POM=$REPO/benchmarks/peers/apache-kafka/pom.xml; PROPERTY=kafka.version
        REQUIRED=${JARS_REQUIRED:-${KAFKA_JARS_REQUIRED:-0}} ;;
    apache-kafka-mirrormaker2)
        LABEL="Apache Kafka's MirrorMaker 2"; POM=$REPO/benchmarks/peers/apache-kafka/mirrormaker2/pom.xml
        PROPERTY=kafka.version; REQUIRED=${JARS_REQUIRED:-${KAFKA_JARS_REQUIRED:-0}} ;;
    apache-hadoop)
        LABEL="Apache Hadoop"; POM=$REPO/scripts/jars/apache-hadoop/pom.xml; PROPERTY=hadoop.version
        REQUIRED=${JARS_REQUIRED:-0} ;;
    apache-iceberg)
        LABEL="Apache Iceberg's Spark runtime"; POM=$REPO/scripts/jars/apache-iceberg/pom.xml
        PROPERTY=iceberg.version; REQUIRED=${JARS_REQUIRED:-0} ;;
    *)
        echo "usage: $0 apache-kafka|apache-kafka-mirrormaker2|apache-hadoop|apache-iceberg" >&2
        exit 2 ;;
esac
NAME=install-jars
VERSION=$(sed -n "s:.*<$PROPERTY>\(.*\)</$PROPERTY>.*:\1:p" "$POM")
CACHE=${LOGFERRY_BENCH_CACHE:-$REPO/benchmarks/.cache}
JARS=$CACHE/$SET-$VERSION
UNAVAILABLE=$JARS.unavailable

[[ -e "$JARS/.resolved" ]] && exit 0

# Say why there are no jars, keep the reason for the tests, and stop.
give_up() {
    echo "$NAME: $1" >&2
    mkdir -p "$CACHE"
    echo "$1" >"$UNAVAILABLE"
    [[ "$REQUIRED" == 1 ]] && exit 1
    exit 0
}

if ! command -v mvn >/dev/null 2>&1; then
    if (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1; then
        echo "$NAME: installing Debian's maven with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -qq --no-install-recommends maven </dev/null >/dev/null; then
            apt-get update -qq && apt-get install -y -qq --no-install-recommends maven </dev/null >/dev/null || true
        fi
    fi
    command -v mvn >/dev/null 2>&1 \
        || give_up "no mvn, so no $LABEL $VERSION jars; as root: apt-get install -y maven, then $0 $SET"
fi

echo "$NAME: resolving $LABEL $VERSION from Maven Central into $JARS" >&2
mkdir -p "$CACHE"
partial=$(mktemp -d "$CACHE/.$SET-$VERSION.XXXXXX")
log=$partial.log
if timeout 900 mvn -B -q -f "$POM" dependency:copy-dependencies -DoutputDirectory="$partial" </dev/null >"$log" 2>&1; then
    echo "$VERSION" >"$partial/.resolved"
    rm -rf "$JARS" "$UNAVAILABLE" "$log"
    mv "$partial" "$JARS"
else
    rm -rf "$partial"
    reason=$(grep -m 1 -E '\[ERROR\]' "$log" | cut -c 1-300 || true)
    rm -f "$log"
    give_up "mvn could not resolve $LABEL $VERSION from Maven Central (${reason:-see mvn -f $POM dependency:copy-dependencies})"
fi
