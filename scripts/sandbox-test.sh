#!/usr/bin/env bash
# The sandbox's tests with the real bubblewrap: installs Debian's `bubblewrap` when missing,
# then runs the tests that need it with LOOPWRIGHT_REQUIRE_SANDBOX=1, so a machine that cannot
# make a sandbox fails them instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install.sh bwrap bubblewrap
echo "== sandbox tests (bubblewrap $(bwrap --version | awk '{print $2}'))"
cargo run --quiet -p loopwright -- doctor
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright-runners --test sandbox
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright --test all -- sandbox::
