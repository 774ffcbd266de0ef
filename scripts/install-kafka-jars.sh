#!/usr/bin/env bash
# Apache Kafka's jars from Maven Central: the broker and the tools the benchmarks run
# next to logferry (benchmarks/vs_kafka.py), and the Java clients and command-line tools
# the tests run against logferry's Kafka listener (tests/integration/test_kafka_java.py).
# One pom (benchmarks/peers/apache-kafka/pom.xml), resolved with Debian's maven into
# benchmarks/.cache/apache-kafka-<version>/ (git-ignored; LOGFERRY_BENCH_CACHE=/elsewhere
# to keep it outside the clone); then MirrorMaker 2's
# (benchmarks/peers/apache-kafka/mirrormaker2/pom.xml, a version of its own: see there)
# into benchmarks/.cache/apache-kafka-mirrormaker2-<version>/ the same way.
# `make test` runs this (target kafka-jars).
#
# Idempotent and quick: when the folder's .resolved marker is there, nothing runs (no
# mvn). Otherwise mvn copies every jar into a temporary folder, renamed once complete,
# so a cut-off download is redone, never half used. Without mvn, as root, it installs
# Debian's maven first. When the jars cannot be had (no mvn, Maven Central unreachable)
# it says why in one line, writes that line into <folder>.unavailable (the tests skip
# with it) and exits 0 unless KAFKA_JARS_REQUIRED=1: a machine without Maven Central
# still runs every other test. Each folder is resolved on its own (MirrorMaker 2's
# after the others, so its failure never costs the clients and tools).
#
#   scripts/install-kafka-jars.sh
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${LOGFERRY_BENCH_CACHE:-$REPO/benchmarks/.cache}

# Say why there are no jars, keep the reason for the tests, and stop.
give_up() {
    echo "install-kafka-jars: $1" >&2
    mkdir -p "$CACHE"
    echo "$1" >"$UNAVAILABLE"
    [[ "${KAFKA_JARS_REQUIRED:-0}" == 1 ]] && exit 1
    exit 0
}

need_mvn() {
    command -v mvn >/dev/null 2>&1 && return 0
    if (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1; then
        echo "install-kafka-jars: installing Debian's maven with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -qq --no-install-recommends maven </dev/null >/dev/null; then
            apt-get update -qq && apt-get install -y -qq --no-install-recommends maven </dev/null >/dev/null || true
        fi
    fi
    command -v mvn >/dev/null 2>&1 \
        || give_up "no mvn, so no $WHAT jars; as root: apt-get install -y maven, then $0"
}

# resolve POM FOLDER-NAME: every jar of POM into $CACHE/FOLDER-NAME, unless done before.
resolve() {
    local pom=$1 partial log reason version
    version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
    JARS=$CACHE/$2-$version
    UNAVAILABLE=$JARS.unavailable
    WHAT="Apache Kafka $version ($2)"
    [[ -e "$JARS/.resolved" ]] && return 0
    need_mvn
    echo "install-kafka-jars: resolving $WHAT from Maven Central into $JARS" >&2
    mkdir -p "$CACHE"
    partial=$(mktemp -d "$CACHE/.$2-$version.XXXXXX")
    log=$partial.log
    if timeout 900 mvn -B -q -f "$pom" dependency:copy-dependencies -DoutputDirectory="$partial" </dev/null >"$log" 2>&1; then
        echo "$version" >"$partial/.resolved"
        rm -rf "$JARS" "$UNAVAILABLE" "$log"
        mv "$partial" "$JARS"
    else
        rm -rf "$partial"
        reason=$(grep -m 1 -E '\[ERROR\]' "$log" | cut -c 1-300 || true)
        rm -f "$log"
        give_up "mvn could not resolve $WHAT from Maven Central (${reason:-see mvn -f $pom dependency:copy-dependencies})"
    fi
}

resolve "$REPO/benchmarks/peers/apache-kafka/pom.xml" apache-kafka
resolve "$REPO/benchmarks/peers/apache-kafka/mirrormaker2/pom.xml" apache-kafka-mirrormaker2
