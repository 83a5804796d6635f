#!/usr/bin/env bash
# Starts the services the replica tests need: PostgreSQL (Debian's package,
# run as the `postgres` user, which it requires: it refuses root) in a temp
# data directory on 127.0.0.1 with a free port, and installs nginx (the tests
# start their own nginx with a generated configuration). Writes the store URL
# to .services/postgres.url, which tests/replicas*.rs read; they fail, naming
# this script, when it is missing or the server does not answer.
# Idempotent: a server still answering at the recorded URL is kept.
# Works unattended (CI=true, no stdin).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

pg_bin() {
  # Debian keeps the server binaries out of PATH.
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

missing=()
pg_bin >/dev/null || missing+=(postgresql)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "services: ${missing[*]} missing and not root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian package starts its own cluster and nginx on port 80: neither is
# used (the tests start their own); leave them as they are.

BIN=$(pg_bin) || { echo "services: PostgreSQL server binaries not found under /usr/lib/postgresql" >&2; exit 1; }
mkdir -p .services
URL_FILE=.services/postgres.url

if [ -s "$URL_FILE" ] && "$BIN/pg_isready" -q -d "$(cat "$URL_FILE")"; then
  echo "services: PostgreSQL already running at $(cat "$URL_FILE")"
  exit 0
fi

RUN_AS=()
if [ "$(id -u)" = 0 ]; then
  RUN_AS=(runuser -u postgres --)
fi
DATA=$(mktemp -d /tmp/toolsched-pg.XXXXXX)
chmod 700 "$DATA"
[ "$(id -u)" = 0 ] && chown postgres: "$DATA"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${RUN_AS[@]}" "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-instructions >/dev/null
# Many test servers connect at once (three replicas per test, tests in
# parallel): room for them.
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$DATA" -w -l "$DATA/server.log" \
  -o "-h 127.0.0.1 -p $PORT -k $DATA -c max_connections=400 -c fsync=off" start >/dev/null
URL="postgres://postgres@127.0.0.1:$PORT/postgres"
"$BIN/pg_isready" -q -d "$URL" || { echo "services: PostgreSQL did not start; see $DATA/server.log" >&2; exit 1; }
echo "$URL" > "$URL_FILE"
echo "services: PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') at $URL (data $DATA)"
