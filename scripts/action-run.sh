#!/usr/bin/env bash
# The composite action's second step (action.yml): runs the pipeline with the action's inputs,
# given as environment variables (never pasted into the script, where a task's text could run as
# shell). loopwright itself writes the annotations, the job's summary and the step's outputs.
set -euo pipefail
args=(run "$LOOPWRIGHT_PIPELINE")
if [ -n "${LOOPWRIGHT_TASK:-}" ]; then
  args+=(--task "$LOOPWRIGHT_TASK")
fi
while IFS= read -r line; do
  line=${line#"${line%%[![:space:]]*}"}
  if [ -n "$line" ]; then
    args+=(--var "$line")
  fi
done <<< "${LOOPWRIGHT_VARS:-}"
if [ -n "${LOOPWRIGHT_REPORT:-}" ]; then
  args+=(--report "junit=$LOOPWRIGHT_REPORT")
fi
exec loopwright "${args[@]}"
