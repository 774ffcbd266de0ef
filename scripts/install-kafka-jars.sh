#!/usr/bin/env bash
# Apache Kafka's jars from Maven Central: `scripts/install-jars.sh apache-kafka` (which
# says what and where), under the name the Makefile, the docs and the benchmarks use.
#
#   scripts/install-kafka-jars.sh
exec "$(dirname "${BASH_SOURCE[0]}")/install-jars.sh" apache-kafka
