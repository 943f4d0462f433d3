#!/bin/bash
# Paired cross-process rounds (ABBA), the aaa-peer pair alone: 1077a2c (main0) against HEAD.
cd /tmp
for r in $(seq 1 ${1:-60}); do
  if (( r % 2 )); then order="main0 head"; else order="head main0"; fi
  for t in $order; do
    /tmp/bench-head --only xproc --pairs aaa-peer+aaa-peer --xruns 1 --aaa-peer /tmp/aaa-peer-$t > ${OUT:-/work/notes/xp4}/r$r-$t.txt 2>&1
  done
done
echo done > ${OUT:-/work/notes/xp4}/done
