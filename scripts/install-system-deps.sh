#!/usr/bin/env bash
# Install what the integration tests need from the system: a Java runtime (>= 11),
# Debian's ZooKeeper server jars (broker/testing/zkserver.py runs them without systemd)
# and promtool from Debian's `prometheus` package (the tests check every metrics
# endpoint with `promtool check metrics`; about 19 MB to download, 96 MB installed;
# the Prometheus server it also installs is not started), and Debian's `chromium` (the
# console's browser tests drive it with Playwright, which cannot download a browser here),
# Debian's `kcat` (the Kafka listener's tests run `kcat -L`, `-P` and `-C` against it),
# and Node.js with npm (tests/integration/test_kafkajs.py installs kafkajs with npm into
# its tmp dir): Debian's `nodejs npm` only when npm is absent, since a Node.js from
# elsewhere (NodeSource bundles npm) conflicts with Debian's `npm` package. And Debian's
# `maven`: scripts/install-jars.sh resolves Kafka's and Hadoop's jars with it, and would
# otherwise run apt-get itself, beside this script's when `make test` runs them in parallel.
#
# Idempotent and quiet: when everything is present it prints nothing and exits 0.
# As root it installs the missing packages (one `apt-get update`, then one install).
# As another user it prints the exact command to run as root and exits 1.
set -euo pipefail

JAVA_DIR=/usr/share/java
# Keep in step with ZOOKEEPER_JARS and APT_PACKAGES in broker/testing/zkserver.py.
REQUIRED_JARS=(zookeeper.jar zookeeper-jute.jar slf4j-api.jar slf4j-log4j12.jar log4j-1.2.jar)
PACKAGES=(zookeeper default-jre-headless prometheus chromium curl kcat maven)
MIN_JAVA=11

# The java that broker/testing/zkserver.py will run: $JAVA_HOME/bin/java first, else PATH.
java_bin() {
    if [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
        echo "${JAVA_HOME}/bin/java"
    else
        command -v java || true
    fi
}

# Major version of a java executable: "17.0.15" -> 17, "1.8.0_292" -> 8, 0 if unknown.
java_major() {
    local version
    version=$("$1" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)
    case "$version" in
        1.*) version=${version#1.} ;;
    esac
    version=${version%%[!0-9]*}
    echo "${version:-0}"
}

# Fill the array MISSING with what is absent: "java", "java 11+ (found 8)", jar names.
find_missing() {
    local java major jar
    MISSING=()
    java=$(java_bin)
    if [[ -z "$java" ]]; then
        MISSING+=("java")
    else
        major=$(java_major "$java")
        if (( major < MIN_JAVA )); then
            MISSING+=("java ${MIN_JAVA}+ (${java} is ${major})")
        fi
    fi
    for jar in "${REQUIRED_JARS[@]}"; do
        [[ -f "${JAVA_DIR}/${jar}" ]] || MISSING+=("${JAVA_DIR}/${jar}")
    done
    command -v promtool >/dev/null 2>&1 || MISSING+=("promtool")
    [[ -x /usr/bin/chromium ]] || MISSING+=("chromium")
    command -v curl >/dev/null 2>&1 || MISSING+=("curl")
    command -v kcat >/dev/null 2>&1 || MISSING+=("kcat")
    command -v npm >/dev/null 2>&1 || MISSING+=("npm")
    # Maven only where this script may install it: without it, as another user,
    # scripts/install-jars.sh says so and the tests that need its jars skip, as before.
    if (( EUID == 0 )); then
        command -v mvn >/dev/null 2>&1 || MISSING+=("mvn")
    fi
}

# "a, b, c" from the MISSING array.
missing_list() {
    local out="" item
    for item in "${MISSING[@]}"; do
        out+="${out:+, }${item}"
    done
    echo "$out"
}

find_missing
(( ${#MISSING[@]} == 0 )) && exit 0

command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)
install_cmd="apt-get install -y --no-install-recommends ${PACKAGES[*]}"
what=$(missing_list)

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: missing ${what}; this machine has no apt-get: install a Java ${MIN_JAVA}+ runtime, ZooKeeper 3.8 jars in ${JAVA_DIR}, promtool, chromium, kcat, Maven and Node.js with npm (Debian/Ubuntu: ${install_cmd})" >&2
    exit 1
fi

if (( EUID != 0 )); then
    echo "install-system-deps: missing ${what}; run as root: sudo apt-get update && sudo ${install_cmd}" >&2
    exit 1
fi

echo "install-system-deps: missing ${what}; installing ${PACKAGES[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends ${PACKAGES[*]} </dev/null

find_missing
if (( ${#MISSING[@]} > 0 )); then
    echo "install-system-deps: still missing after apt-get install: $(missing_list); install them by hand (for a too old java: set JAVA_HOME to a JDK ${MIN_JAVA}+)" >&2
    exit 1
fi
