#!/usr/bin/env bash
# The forge tests: installs the GitHub-compatible test server's packages (GitHub's OpenAPI
# description, its webhook examples and schemas, Ajv; pinned in tests/forge/package-lock.json)
# when missing, then runs every test that talks to that server, requiring it to be there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d tests/forge/node_modules/@octokit/openapi ]; then
  echo "== installing the GitHub test server's packages (npm)"
  (cd tests/forge && npm ci --no-audit --no-fund --loglevel=error)
fi
export LOOPWRIGHT_REQUIRE_FORGE=1
echo "== the GitHub adapter against the test server"
cargo test --quiet -p loopwright-forge
echo "== issues to pull requests through the binary"
cargo test --quiet -p loopwright --test all -- forge:: --test-threads 4
