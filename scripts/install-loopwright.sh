#!/usr/bin/env bash
# Installs loopwright's released binary for this machine — the composite action's first step
# (action.yml). Downloads loopwright-TARGET.tar.gz and its .sha256 from the release
# LOOPWRIGHT_VERSION (a tag, or `latest`) of LOOPWRIGHT_REPOSITORY on GitHub (or from
# LOOPWRIGHT_RELEASE_URL, a folder laid out as GitHub's release downloads are), refuses an
# archive whose SHA-256 differs from the published one, and puts the binary on the job's PATH
# ($GITHUB_PATH) — or into LOOPWRIGHT_INSTALL_DIR.
set -euo pipefail
fail() {
  echo "::error title=loopwright install::$1"
  echo "loopwright install: $1" >&2
  exit 1
}
version=${LOOPWRIGHT_VERSION:-latest}
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) target=x86_64-unknown-linux-gnu ;;
  Linux-aarch64 | Linux-arm64) target=aarch64-unknown-linux-gnu ;;
  *) fail "no loopwright release is built for $(uname -s) on $(uname -m); it runs on Linux (x86_64 or aarch64)" ;;
esac
if [ -n "${LOOPWRIGHT_RELEASE_URL:-}" ]; then
  base=$LOOPWRIGHT_RELEASE_URL
else
  [ -n "${LOOPWRIGHT_REPOSITORY:-}" ] || fail "LOOPWRIGHT_REPOSITORY (OWNER/NAME) is not set"
  base="https://github.com/$LOOPWRIGHT_REPOSITORY/releases"
fi
case "$version" in
  latest) url="$base/latest/download" ;;
  v[0-9]*) url="$base/download/$version" ;;
  *) fail "version \`$version\` is neither \`latest\` nor a release tag such as v1.2.0" ;;
esac
asset="loopwright-$target.tar.gz"
work=$(mktemp -d "${RUNNER_TEMP:-/tmp}/loopwright-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/$asset" "$url/$asset" || fail "cannot download $url/$asset"
curl -fsSL --retry 3 -o "$work/$asset.sha256" "$url/$asset.sha256" || fail "cannot download $url/$asset.sha256"
expected=$(head -c 64 "$work/$asset.sha256")
[[ $expected =~ ^[0-9a-f]{64}$ ]] || fail "$asset.sha256 does not hold a SHA-256"
actual=$(sha256sum "$work/$asset" | cut -c 1-64)
[ "$actual" = "$expected" ] || fail "the checksum of $asset is $actual, not the published $expected: not installed"
dest=${LOOPWRIGHT_INSTALL_DIR:-${RUNNER_TOOL_CACHE:-$HOME/.local}/loopwright/$version/bin}
mkdir -p "$dest" "$work/unpacked"
tar -xzf "$work/$asset" -C "$work/unpacked"
[ -f "$work/unpacked/loopwright" ] || fail "$asset holds no loopwright binary"
install -m 0755 "$work/unpacked/loopwright" "$dest/loopwright"
if [ -n "${GITHUB_PATH:-}" ]; then
  echo "$dest" >> "$GITHUB_PATH"
fi
echo "installed $("$dest/loopwright" --version) ($target, sha256 $actual) in $dest"
