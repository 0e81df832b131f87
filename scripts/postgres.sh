#!/usr/bin/env bash
# Runs a command with a PostgreSQL database at hand.
#
#   scripts/postgres.sh temp CMD...  a throwaway cluster for tests, unless
#                                    TEST_DATABASE_URL or DATABASE_URL is set;
#                                    CMD sees TEST_DATABASE_URL; the cluster is
#                                    stopped and deleted when CMD ends.
#   scripts/postgres.sh bench CMD... like temp, but with production
#                                    durability (fsync and synchronous_commit
#                                    on), for benchmarks; BENCH_DATABASE_URL
#                                    overrides it.
#   scripts/postgres.sh dev CMD...   a persistent cluster (created on first use,
#                                    reused after) unless DATABASE_URL is set;
#                                    CMD sees DATABASE_URL; the cluster stops
#                                    when CMD ends.
#
# Uses initdb/pg_ctl from PATH, /usr/lib/postgresql/*/bin or Homebrew's
# postgresql@*. The clusters run as the invoking user, except as root:
# initdb refuses root, so they run as the "postgres" user. That user may not
# reach the repository (a clone under a private home, mode 700), so a root's
# development cluster lives in postgres's home, in a folder named after the
# repository's path (one per clone), not in .data/postgres; PGDEV_DIR
# overrides both.
set -euo pipefail

mode=${1:-}; shift || true
if [[ "$mode" != temp && "$mode" != dev && "$mode" != bench ]] || [[ $# -eq 0 ]]; then
  echo "usage: $0 temp|bench|dev COMMAND [ARGS...]" >&2
  exit 2
fi

if [[ "$mode" == temp ]]; then
  url=${TEST_DATABASE_URL:-${DATABASE_URL:-}}
  if [[ -n "$url" ]]; then
    export TEST_DATABASE_URL="$url"
    exec "$@"
  fi
elif [[ "$mode" == bench ]]; then
  if [[ -n "${BENCH_DATABASE_URL:-}" ]]; then
    exec "$@"
  fi
else
  if [[ -n "${DATABASE_URL:-}" ]]; then
    exec "$@"
  fi
fi

find_bin() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin /opt/homebrew/opt/postgresql@*/bin /usr/local/opt/postgresql@*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$dir/$name" ]]; then echo "$dir/$name"; return; fi
  done
  echo "error: $name not found. Install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set DATABASE_URL." >&2
  exit 1
}
INITDB=$(find_bin initdb)
PG_CTL=$(find_bin pg_ctl)

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    if ! id postgres >/dev/null 2>&1; then
      echo "error: running as root needs a 'postgres' user to own the cluster (install the postgresql package, or set DATABASE_URL)" >&2
      exit 1
    fi
    # From a directory postgres can enter: postgres programs look at their
    # working directory, and runuser warns when it is out of reach.
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

if [[ "$mode" == temp ]]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/orchpg.XXXXXX")
  port=5432
  conf=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off)
elif [[ "$mode" == bench ]]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/orchpg.XXXXXX")
  port=5432
  conf=()
else
  dir=${PGDEV_DIR:-}
  if [[ -z "$dir" ]]; then
    dir=$PWD/.data/postgres
    # A cluster made there before stays there; otherwise root's goes to a
    # place postgres can surely reach.
    if [[ $(id -u) -eq 0 && ! -f "$dir/data/PG_VERSION" ]] && id postgres >/dev/null 2>&1; then
      home=$(getent passwd postgres | cut -d: -f6)
      [[ -n "$home" && "$home" != / ]] || home=/var/lib/postgresql
      key=$(printf '%s' "$PWD" | cksum | cut -d' ' -f1)
      dir=$home/orchestrator-dev/$(basename "$PWD")-$key
      mkdir -p "$home/orchestrator-dev"
      chown postgres "$home/orchestrator-dev"
      # Which clone the cluster belongs to, for whoever finds it there.
      mkdir -p "$dir" && printf '%s\n' "$PWD" >"$dir/repository"
    fi
  fi
  port=${PGDEV_PORT:-54320}
  conf=()
  mkdir -p "$dir"
fi
data="$dir/data"
sock="$dir/sock"
mkdir -p "$sock"
[[ $(id -u) -eq 0 ]] && chown postgres "$dir" "$sock" && chmod 700 "$dir"

if [[ ! -f "$data/PG_VERSION" ]]; then
  as_owner "$INITDB" -D "$data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
fi

if [[ "$mode" != dev ]]; then
  listen=""
else
  listen="127.0.0.1"
fi
opts="-c listen_addresses='$listen' -c port=$port -c unix_socket_directories='$sock' -c max_connections=300 -c shared_buffers=256MB ${conf[*]:-}"
as_owner "$PG_CTL" -D "$data" -l "$dir/postgres.log" -o "$opts" -w -t 60 start >/dev/null || {
  echo "error: PostgreSQL did not start; its log:" >&2; cat "$dir/postgres.log" >&2; exit 1; }

cleanup() {
  as_owner "$PG_CTL" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
  if [[ "$mode" != dev ]]; then rm -rf "$dir"; fi
}
trap cleanup EXIT INT TERM

if [[ "$mode" == temp ]]; then
  export TEST_DATABASE_URL="postgres://postgres@/postgres?host=$sock&port=$port&sslmode=disable"
elif [[ "$mode" == bench ]]; then
  export BENCH_DATABASE_URL="postgres://postgres@/postgres?host=$sock&port=$port&sslmode=disable"
else
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "PostgreSQL (development cluster in $dir) at $DATABASE_URL" >&2
fi
set +e
"$@"
status=$?
exit $status
