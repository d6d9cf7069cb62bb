#!/usr/bin/env bash
# The sandbox's tests with the real bubblewrap: installs Debian's `bubblewrap` when missing,
# then runs the tests that need it with LOOPWRIGHT_REQUIRE_SANDBOX=1, so a machine that cannot
# make a sandbox fails them instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  echo "== installing bubblewrap (Debian)"
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
    { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq bubblewrap; }
fi
echo "== sandbox tests (bubblewrap $(bwrap --version | awk '{print $2}'))"
cargo run --quiet -p loopwright -- doctor
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright-runners --test sandbox
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright --test all -- sandbox::
