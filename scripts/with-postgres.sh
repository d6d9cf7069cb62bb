#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL: `scripts/with-postgres.sh CMD [ARGS…]`.
# Installs Debian's `postgresql` when missing, makes a cluster in a temporary folder (initdb),
# starts it on a free port of 127.0.0.1, runs CMD with LOOPWRIGHT_TEST_PG set to its URL
# (postgres://lw@127.0.0.1:PORT/postgres), then stops the cluster and removes the folder,
# whatever CMD did. Tests that need PostgreSQL make a database of their own in it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install.sh pg_ctlcluster postgresql
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
dir=$(mktemp -d)
as=()
if [ "$(id -u)" -eq 0 ]; then
  # initdb refuses to run as root: the cluster belongs to the postgres user.
  chown postgres: "$dir"
  as=(runuser -u postgres --)
fi
stop() {
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
"${as[@]}" "$bin/initdb" -D "$dir/data" -U lw --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null
for try in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  if "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null; then
    break
  fi
  [ "$try" -eq 5 ] && { cat "$dir/log" >&2; exit 1; }
done
export LOOPWRIGHT_TEST_PG="postgres://lw@127.0.0.1:$port/postgres"
echo "== PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (scripts/with-postgres.sh)"
"$@"
