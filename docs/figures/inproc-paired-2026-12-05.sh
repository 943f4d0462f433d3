#!/bin/bash
# Paired in-process rounds (ABBA) of the bench harness's roundtrip section: bench built from 1077a2c (main0) against HEAD.
cd /tmp
for r in $(seq 1 ${1:-4}); do
  if (( r % 2 )); then order="main0 head"; else order="head main0"; fi
  for t in $order; do
    /tmp/bench-$t --only roundtrip > ${OUT:-/work/notes/rt28}/r$r-$t.txt 2>&1
  done
done
echo done > ${OUT:-/work/notes/rt28}/done
