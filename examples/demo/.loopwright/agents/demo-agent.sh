#!/bin/sh
# A scripted stand-in for a coding agent, so the demo runs offline and deterministically.
# Like any `runner: command` agent it gets the prompt on stdin (and in $LOOPWRIGHT_PROMPT_FILE)
# and answers on stdout with one `## key` section per output.
prompt=$(cat)

case "$LOOPWRIGHT_STAGE_ID" in
  diagnose)
    failures=$(sh tests/test_calc.sh | grep '^FAIL' || true)
    echo "## diagnosis"
    if [ -z "$failures" ]; then
      echo "All tests pass; nothing to fix."
    else
      echo "The test suite fails:"
      echo "$failures"
      echo "add() subtracts its second argument instead of adding it."
    fi
    echo
    echo "## affected_files"
    grep -l 'add()' src/*.sh
    ;;
  fix)
    # Read the file to change from the `affected_files` input in the prompt.
    file=$(printf '%s\n' "$prompt" | sed -n '/^## affected_files/{n;p;q}')
    if [ -z "$file" ] || [ ! -f "$file" ]; then
      echo "no affected file in the prompt" >&2
      exit 1
    fi
    before=$(grep -n 'echo \$(( \$1 - \$2 ))' "$file")
    sed 's/echo \$(( \$1 - \$2 ))/echo $(( $1 + $2 ))/' "$file" > "$file.new" && mv "$file.new" "$file"
    echo "## code_changes"
    echo "$file: ${before:-no change needed} -> $(grep -n 'echo \$(( \$1 + \$2 ))' "$file")"
    ;;
  *)
    echo "## security_review"
    echo "No security impact."
    ;;
esac
