#!/usr/bin/env bash
# The PostgreSQL store's tests against a real, throwaway PostgreSQL (scripts/with-postgres.sh,
# which installs Debian's `postgresql` when missing): the conformance suite and the races only
# a shared server has, the journal kept there by every command, and the workers (claims,
# leases, takeovers, a bounded chaos test with kill -9). LOOPWRIGHT_REQUIRE_PG=1 makes a missing server fail them instead of
# skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOPWRIGHT_REQUIRE_PG=1 scripts/with-postgres.sh sh -c \
  'cargo test --quiet -p loopwright-store --test postgres && cargo test --quiet -p loopwright --test all -- postgres:: fleet:: limits::'
