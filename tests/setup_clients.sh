#!/usr/bin/env bash
# Installs the client libraries for their test suites (run by tests/clients.rs):
# the Python package with its test extra (pytest, grpcio-tools for the
# generated-code check) into ./.venv, as a user would install it. Called from
# tests/setup.sh; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/pip install --quiet --disable-pip-version-check "./clients/python[test]"
.venv/bin/python -c "import toolsched, toolsched.aio" || { echo "setup_clients: the toolsched Python package did not install" >&2; exit 1; }
