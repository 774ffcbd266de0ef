#!/usr/bin/env bash
# Create (or repair) the project's virtualenv in .venv and install the project into it
# in editable mode with every extra (agent, mirror, loader: `all`) and the dev tools.
# `make venv` runs this when pyproject.toml is newer than the stamp file
# .venv/.logferry-installed.
#
# The project runs on Python 3.11 to 3.13 (pyproject: requires-python >=3.11,<3.14), so
# look for `python3.13`, `python3.12`, `python3.11`, then `python3`, and check the version
# instead of trusting the name. PYTHON=/path/to/python overrides the search (it must be
# one of those versions too). An existing .venv of a supported version is kept.
set -euo pipefail

VENV=.venv
STAMP="${VENV}/.logferry-installed"
WANT="3.11 3.12 3.13"

is_wanted() {
    "$1" -c "import sys; sys.exit(0 if '%d.%d' % sys.version_info[:2] in '${WANT}'.split() else 1)" >/dev/null 2>&1
}

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && is_wanted "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -x "${VENV}/bin/python" ]] && ! is_wanted "${VENV}/bin/python"; then
    echo "make-venv: ${VENV} is not Python 3.11 to 3.13; recreating it" >&2
    rm -rf "${VENV}"
fi

if [[ ! -x "${VENV}/bin/python" ]]; then
    if ! python=$(find_python); then
        echo "make-venv: no Python 3.11 to 3.13 found (tried ${PYTHON:+$PYTHON, }python3.13, python3.12, python3.11, python3); install one (Debian 12: apt-get install python3.11-venv) or run: make venv PYTHON=/path/to/python3.12" >&2
        exit 1
    fi
    echo "make-venv: creating ${VENV} with ${python}" >&2
    rm -rf "${VENV}"
    if ! "$python" -m venv "${VENV}"; then
        echo "make-venv: '${python} -m venv' failed; on Debian install the venv module: apt-get install python3-venv" >&2
        exit 1
    fi
fi

rm -f "${STAMP}"
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[all,dev]"
touch "${STAMP}"
