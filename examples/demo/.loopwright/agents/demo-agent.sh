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
    if grep -q '<retry_context' "$LOOPWRIGHT_PROMPT_FILE"; then
      # A retry: loopwright fed the failed checks back. Repair exactly the functions whose
      # tests the feedback names (`FAIL sub 7 4: got 11, expected 3`).
      fixed=""
      for fn in $(sed -n 's/^ *FAIL \([a-z]*\) .*/\1/p' "$LOOPWRIGHT_PROMPT_FILE" | sort -u); do
        case "$fn" in
          add) op='+' ;;
          sub) op='-' ;;
          mul) op='*' ;;
          *) continue ;;
        esac
        sed "/^$fn() {/{n;s/.*/  echo \$(( \$1 $op \$2 ))/;}" "$file" > "$file.new" && mv "$file.new" "$file"
        fixed="$fixed $fn()"
      done
      echo "## code_changes"
      echo "$file: following the feedback, repaired${fixed:- nothing}"
    else
      # First attempt: swap the operator the diagnosis blames, everywhere in the file. Too
      # broad, as agents sometimes are: it also breaks sub(), and the check will say so.
      sed 's/\$1 - \$2/$1 + $2/g' "$file" > "$file.new" && mv "$file.new" "$file"
      echo "## code_changes"
      echo "$file: replaced '\$1 - \$2' with '\$1 + \$2'"
    fi
    ;;
  *)
    echo "## security_review"
    echo "No security impact."
    ;;
esac
