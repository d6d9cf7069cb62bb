#!/usr/bin/env bash
# Installs a Debian package when its command is missing: `scripts/apt-install.sh COMMAND PACKAGE`.
# As root, or through sudo; the package lists are refreshed only when the first try fails.
set -euo pipefail
command -v "$1" >/dev/null 2>&1 && exit 0
echo "== installing $2 (Debian)"
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get install -y -qq "$2" >/dev/null 2>&1 ||
  { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq "$2"; }
