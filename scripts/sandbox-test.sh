#!/usr/bin/env bash
# The sandbox's tests with the real bubblewrap: installs Debian's `bubblewrap` (and
# `fuse-overlayfs`, the layers' fallback where the kernel's overlay cannot be mounted without
# privileges) when missing, then runs the tests that need them with LOOPWRIGHT_REQUIRE_SANDBOX=1,
# so a machine that cannot make a sandbox fails them instead of skipping them. The CLI's sandbox
# tests run twice: with the layers the machine picks, and with fuse-overlayfs where it works.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install.sh bwrap bubblewrap
scripts/apt-install.sh fuse-overlayfs fuse-overlayfs || echo "note: fuse-overlayfs could not be installed"
echo "== sandbox tests (bubblewrap $(bwrap --version | awk '{print $2}'))"
cargo run --quiet -p loopwright -- doctor
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright-runners --test sandbox
LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright --test all -- sandbox::
if LOOPWRIGHT_OVERLAY=fuse cargo run --quiet -p loopwright -- doctor | grep -q "layers *fuse-overlayfs"; then
  echo "== the same with layers by fuse-overlayfs"
  LOOPWRIGHT_OVERLAY=fuse LOOPWRIGHT_REQUIRE_SANDBOX=1 cargo test --quiet -p loopwright --test all -- sandbox:: --skip the_real_
else
  echo "note: fuse-overlayfs cannot mount a layer here; its path was not tested end to end"
fi
