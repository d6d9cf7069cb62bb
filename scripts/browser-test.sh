#!/usr/bin/env bash
# The dashboard's browser test: installs Debian's chromium and playwright-core (pinned in
# tests/browser/package-lock.json) when missing, builds the binary, and runs
# tests/browser/*.test.mjs with Node's test runner against a real daemon.
# LOOPWRIGHT_SCREENSHOTS=docs writes the README's screenshots into docs/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install.sh chromium chromium
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  echo "== installing playwright-core (npm)"
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
cargo build --quiet -p loopwright
echo "== browser test (chromium $(chromium --version 2>/dev/null | awk '{print $2}'))"
node --test --test-reporter=spec tests/browser/
