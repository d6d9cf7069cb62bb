#!/bin/sh
# A stand-in agent for trying pipelines without an AI CLI: it reads the prompt loopwright
# gives it and answers with one `## key` section per output the stage expects.
cat > /dev/null
prompt_file="${LOOPWRIGHT_PROMPT_FILE:?}"
task=$(sed -n '/^# Task$/{n;p;q}' "$prompt_file")
inputs=$(grep -c '^## .* (from stage\|^## .* (initial input' "$prompt_file")
sed -n '/^# Outputs$/,$p' "$prompt_file" | sed -n 's/^## //p' | while read -r key; do
  echo "## $key"
  case "$key" in
    risks_identified) echo "${LOOPWRIGHT_RISKS:-1}" ;;
    feedback_items) printf '```yaml\n[]\n```\n' ;;
    *)
      echo "$key by $LOOPWRIGHT_STAGE_ID ($LOOPWRIGHT_MODE mode, attempt $LOOPWRIGHT_ATTEMPT) for: $task"
      echo "Read $inputs input section(s)."
      ;;
  esac
  echo
done
