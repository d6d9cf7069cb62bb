#!/bin/sh
# A tiny calculator library with a bug for the demo to fix.

add() {
  echo $(( $1 - $2 ))
}

sub() {
  echo $(( $1 - $2 ))
}

mul() {
  echo $(( $1 * $2 ))
}
