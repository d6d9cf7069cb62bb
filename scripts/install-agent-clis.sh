#!/usr/bin/env bash
# Installs the real coding-agent CLIs that loopwright's presets drive, into DEST (default:
# target/agent-clis), for the test that checks every flag a preset uses against each CLI's
# own --help. Idempotent: an existing install is kept. Needs npm (and python3 for aider).
#   npm:  @anthropic-ai/claude-code @openai/codex @google/gemini-cli opencode-ai
#   PyPI: aider-chat (into DEST/aider-venv)
# goose is distributed as a binary from GitHub releases, not on npm or PyPI: not installed.
set -u
dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/agent-clis}"
mkdir -p "$dest"
cd "$dest" || exit 1
status=0
if command -v npm >/dev/null 2>&1; then
  if [ ! -x node_modules/.bin/opencode ] || [ ! -x node_modules/.bin/claude ] || [ ! -x node_modules/.bin/codex ] || [ ! -x node_modules/.bin/gemini ]; then
    [ -f package.json ] || echo '{"name": "loopwright-agent-clis", "private": true}' > package.json
    npm install --no-audit --no-fund @anthropic-ai/claude-code @openai/codex @google/gemini-cli opencode-ai >&2 || status=1
  fi
  # Some npm versions skip install scripts unless approved; the CLIs need theirs (native
  # binaries). Run them when the binary says they did not run.
  for pkg in node_modules/@anthropic-ai/claude-code node_modules/opencode-ai; do
    [ -d "$pkg" ] || continue
    bin=claude; [ "$pkg" = node_modules/opencode-ai ] && bin=opencode
    if node_modules/.bin/$bin --version 2>&1 | grep -q "postinstall\|not installed"; then
      (cd "$pkg" && npm run postinstall >&2) || status=1
    fi
  done
else
  echo "npm not found: the npm CLIs cannot be installed" >&2
  status=1
fi
if command -v python3 >/dev/null 2>&1; then
  if [ ! -x aider-venv/bin/aider ]; then
    (python3 -m venv aider-venv && aider-venv/bin/pip install -q aider-chat) >&2 || status=1
  fi
else
  echo "python3 not found: aider cannot be installed" >&2
  status=1
fi
exit $status
