#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL: `scripts/with-postgres.sh CMD [ARGS…]`.
# Installs Debian's `postgresql` (and `openssl`) when missing, makes a cluster in a temporary
# folder (initdb) with TLS on (a certificate for 127.0.0.1 signed by a CA made for the run),
# starts it on a free port of 127.0.0.1, runs CMD with LOOPWRIGHT_TEST_PG set to its URL
# (postgres://lw@127.0.0.1:PORT/postgres) and LOOPWRIGHT_TEST_PG_CA and PGSSLROOTCERT to the
# CA's certificate,
# then stops the cluster and removes the folder, whatever CMD did. Tests that need PostgreSQL
# make a database of their own in it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install.sh pg_ctlcluster postgresql
scripts/apt-install.sh openssl openssl
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
# A signal ends the script through its EXIT trap (the cluster is stopped and removed).
trap "exit 130" INT
trap "exit 143" TERM
"${as[@]}" "$bin/initdb" -D "$dir/data" -U lw --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null
# TLS: a CA for this run, and the server's certificate for 127.0.0.1 signed by it.
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -days 2 -subj /CN=loopwright-test-ca -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req "${ec[@]}" -subj /CN=127.0.0.1 -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$dir/server.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
  -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
chmod 600 "$dir/server.key"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/server.key" "$dir/server.crt"
for try in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  if "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" start >/dev/null; then
    break
  fi
  [ "$try" -eq 5 ] && { cat "$dir/log" >&2; exit 1; }
done
export LOOPWRIGHT_TEST_PG="postgres://lw@127.0.0.1:$port/postgres"
export LOOPWRIGHT_TEST_PG_CA="$dir/ca.crt"
# What loopwright trusts for TLS to PostgreSQL, as libpq's clients do.
export PGSSLROOTCERT="$dir/ca.crt"
echo "== PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (scripts/with-postgres.sh)"
"$@"
