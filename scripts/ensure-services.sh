#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) answer, starting or installing
# them when they do not, and that the nginx and wrk binaries are installed (the inference_auth
# tests, bench and demo start their own unprivileged nginx; the system nginx service is never
# used), and git with git-http-backend (Git sync reads repositories with git; its tests, bench
# and demo serve repositories with git http-backend), and promtool (the chart's alert tests).
# Idempotent: does nothing when everything is already there.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! pg_up; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "installing PostgreSQL (Debian package)" >&2
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ ! -d "/etc/postgresql/$version/main" ]; then
    as_root pg_createcluster "$version" main >/dev/null
  fi
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  # Local development only: trust connections from this machine, as the CI machine does.
  if ! as_root grep -q "^host all all 127.0.0.1/32 trust" "$hba"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nlocal all all trust' "$hba"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 30); do pg_up && break; sleep 0.5; done
  pg_up || { echo "PostgreSQL did not start" >&2; exit 1; }
fi

if ! redis_up; then
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "installing Redis (Debian package)" >&2
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  mkdir -p /tmp/wm-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/wm-redis --logfile /tmp/wm-redis/redis.log
  for _ in $(seq 1 30); do redis_up && break; sleep 0.2; done
  redis_up || { echo "Redis did not start" >&2; exit 1; }
fi
# The Lua module: bench/inference_auth.py measures ingress-nginx's `auth-keepalive` form with it.
if ! command -v nginx >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1 \
  || [ ! -e /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
  echo "installing nginx, its Lua module and wrk (Debian packages)" >&2
  as_root apt-get update -qq
  # policy-rc.d 101 keeps the package from starting the system nginx service: every test,
  # bench and demo runs its own nginx with its own prefix on a free port.
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light libnginx-mod-http-lua wrk >/dev/null
  if [ "$made_policy" = 1 ]; then as_root rm -f "$policy"; fi
fi
if ! command -v git >/dev/null 2>&1 || [ ! -x /usr/lib/git-core/git-http-backend ]; then
  echo "installing git (Debian package)" >&2
  as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null
fi
# promtool (Debian package prometheus): the chart's alert rules are tested with `promtool test
# rules` (tests/unit/chart/test_alerts.py). Nothing here starts the prometheus service:
# policy-rc.d 101 keeps the package from starting it.
if ! command -v promtool >/dev/null 2>&1; then
  echo "installing promtool (Debian package prometheus)" >&2
  as_root apt-get update -qq
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ "$made_policy" = 1 ]; then as_root rm -f "$policy"; fi
fi
echo "services: PostgreSQL and Redis are up; nginx, wrk, git and promtool are installed" >&2
