#!/usr/bin/env bash
# Installs the client libraries for their test suites (run by tests/clients.rs):
# the TypeScript package with npm ci and its build (below), and
# the Python package with its test extra (pytest, grpcio-tools for the
# generated-code check) into ./.venv, as a user would install it. Called from
# tests/setup.sh; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/pip install --quiet --disable-pip-version-check "./clients/python[test]"
.venv/bin/python -c "import toolsched, toolsched.aio" || { echo "setup_clients: the toolsched Python package did not install" >&2; exit 1; }

# The TypeScript package: its locked npm packages (npm ci), then its build
# (ESM + .d.ts in clients/typescript/dist), which its tests import.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup_clients: npm is required for clients/typescript (apt-get install nodejs npm)" >&2
  exit 1
fi
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
