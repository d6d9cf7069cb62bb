#!/usr/bin/env bash
# The sandbox's tests with the real bubblewrap: installs Debian's `bubblewrap` (and
# `fuse-overlayfs`, the layers' fallback where the kernel's overlay cannot be mounted without
# privileges) when missing, then runs the tests that need them with LOOPWRIGHT_REQUIRE_SANDBOX=1,
# so a machine that cannot make a sandbox fails them instead of skipping them. The CLI's sandbox
# tests run twice: with the layers the machine picks, and with fuse-overlayfs where it works;
# run as root, they run a third time as a user who is not root.
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
# The same as a user who is not root, where this runs as root: root passes permission checks a
# user's own files can still fail (the kernel overlay leaves a folder of mode 000 behind).
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null && command -v useradd >/dev/null; then
  user=loopwright-ci
  id "$user" >/dev/null 2>&1 || useradd --create-home "$user"
  home=$(getent passwd "$user" | cut -d: -f6)
  bin=$(cargo test --quiet -p loopwright --test all --no-run --message-format=json \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "all" and m.get("executable"):
        print(m["executable"])' | tail -n 1)
  mkdir -p target/tmp && chmod 1777 target/tmp
  if runuser -u "$user" -- test -x "$bin"; then
    echo "== the sandbox's tests as $user (not root)"
    manifest="$PWD/crates/cli"
    (cd /tmp && runuser -u "$user" -- env HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin \
      CARGO_MANIFEST_DIR="$manifest" LOOPWRIGHT_REQUIRE_SANDBOX=1 "$bin" --quiet sandbox:: graph:: --skip the_real_)
  else
    echo "note: $user cannot reach $bin (a folder on its way is closed to others); not tested as a user"
  fi
fi
