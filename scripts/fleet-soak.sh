#!/usr/bin/env bash
# The lease tests again and again against one throwaway PostgreSQL: `scripts/fleet-soak.sh N`
# runs each of the kill -9, SIGSTOP and cut-off tests of crates/cli/tests/all/fleet.rs N times
# (default 20) and says how many passed. Not part of CI (CI runs each once); for the figures in
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
cargo test --quiet -p loopwright --test all --no-run 2>/dev/null
LOOPWRIGHT_REQUIRE_PG=1 N="$n" scripts/with-postgres.sh bash -c '
  for test in a_worker_killed_mid_stage a_worker_frozen_past_its_lease a_worker_cut_off_from_the_database; do
    passed=0
    for i in $(seq 1 "$N"); do
      if cargo test --quiet -p loopwright --test all -- "fleet::$test" >/tmp/fleet-soak.log 2>&1; then
        passed=$((passed + 1))
      else
        echo "$test: run $i failed:"; tail -40 /tmp/fleet-soak.log
      fi
    done
    echo "$test: $passed of $N passed"
  done'
