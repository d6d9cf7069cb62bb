#!/usr/bin/env bash
# schemathesis against a live daemon, driven by the OpenAPI document the daemon generates:
# no 5xx, every answer conforms to its schema. Installs schemathesis (pinned) into a venv
# under target/ when missing. The two endless event streams are left out (a fuzzer's request
# to them never ends); tests/all/daemon.rs covers them. The seed is fixed so that CI repeats;
# another SCHEMATHESIS_SEED explores further.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/schemathesis-venv
if [ ! -x "$venv/bin/schemathesis" ]; then
  echo "== installing schemathesis (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check schemathesis==4.32.5
fi
cargo build --quiet -p loopwright
bin="$PWD/target/debug/loopwright"
ws=$(mktemp -d)
trap 'kill "$daemon" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$ws"' EXIT
mkdir -p "$ws/.loopwright/pipelines"
cp tests/fixtures/gate.yml "$ws/.loopwright/pipelines/gate.yml"
(cd "$ws" && git init -q -b main && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m initial)
(cd "$ws" && exec "$bin" serve --addr 127.0.0.1:0 --json > serve.out 2> serve.err) &
daemon=$!
for _ in $(seq 100); do [ -s "$ws/serve.out" ] && break; sleep 0.1; done
addr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addr"])' "$ws/serve.out")
token=$(cat "$ws/.loopwright/state/serve.token")
# Runs to look at: one finished, one waiting at its gate.
for _ in 1 2; do
  curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"pipeline": "gate", "approve_all": true}' "http://$addr/api/runs" > /dev/null
done
echo "== schemathesis against http://$addr/openapi.json"
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "http://$addr/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --exclude-path /api/events --exclude-path /api/runs/{run}/output \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-60}" \
  --seed "${SCHEMATHESIS_SEED:-20261123}" \
  --request-timeout 10 \
  --suppress-health-check all \
  --warnings off
if grep -q "panicked" "$ws/serve.err"; then
  cat "$ws/serve.err"
  echo "the daemon panicked" >&2
  exit 1
fi
