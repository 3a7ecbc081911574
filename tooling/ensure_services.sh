#!/usr/bin/env bash
# Make sure PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) answer; start them with this machine's
# own commands when they do not; fail loudly when that is impossible. Never skip.
set -uo pipefail
DATABASE_URL="${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/test}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

pg_ok() { python3 - "$DATABASE_URL" <<'PY'
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
try:
    socket.create_connection((u.hostname or "127.0.0.1", u.port or 5432), timeout=2).close()
except OSError:
    sys.exit(1)
PY
}
redis_ok() { python3 - "$REDIS_URL" <<'PY'
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
try:
    s = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), timeout=2)
    s.sendall(b"PING\r\n")
    ok = s.recv(16).startswith(b"+PONG")
    s.close()
    sys.exit(0 if ok else 1)
except OSError:
    sys.exit(1)
PY
}

wait_for() { # name check
  for _ in $(seq 1 60); do "$2" && return 0; sleep 0.5; done
  return 1
}

if ! pg_ok; then
  echo "PostgreSQL does not answer at $DATABASE_URL: starting it"
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  wait_for postgres pg_ok || { echo "FATAL: PostgreSQL is not reachable at $DATABASE_URL and could not be started" >&2; exit 1; }
fi
echo "PostgreSQL answers at $DATABASE_URL"

if ! redis_ok; then
  echo "Redis does not answer at $REDIS_URL: starting it"
  if command -v redis-server >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
  wait_for redis redis_ok || { echo "FATAL: Redis is not reachable at $REDIS_URL and could not be started" >&2; exit 1; }
fi
echo "Redis answers at $REDIS_URL"
