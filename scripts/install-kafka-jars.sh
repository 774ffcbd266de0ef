#!/usr/bin/env bash
# Apache Kafka's jars from Maven Central: `scripts/install-jars.sh apache-kafka` (which
# says what and where), then MirrorMaker 2's (`apache-kafka-mirrormaker2`, after the
# others, so its failure never costs the clients and tools), under the name the
# Makefile, the docs and the benchmarks use.
#
#   scripts/install-kafka-jars.sh
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
"$here/install-jars.sh" apache-kafka
"$here/install-jars.sh" apache-kafka-mirrormaker2
