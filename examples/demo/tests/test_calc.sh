#!/bin/sh
# Tests of src/calc.sh: prints one line per check, exits 1 when any fails.
. ./src/calc.sh
status=0
check() {
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got $2, expected $3"; status=1; fi
}
check "add 2 3" "$(add 2 3)" 5
check "sub 7 4" "$(sub 7 4)" 3
check "mul 4 5" "$(mul 4 5)" 20
if [ $status -ne 0 ]; then echo "test result: FAILED"; fi
exit $status
