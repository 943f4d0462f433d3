#!/bin/bash
cd /tmp
for r in $(seq 1 ${1:-8}); do
  if (( r % 2 )); then order="main0 head"; else order="head main0"; fi
  for t in $order; do
    /tmp/bench-head --only xproc --pairs raw+aaa-peer,aaa-peer+raw --xruns 1 --aaa-peer /tmp/aaa-peer-$t > $OUT/r$r-$t.txt 2>&1
  done
done
echo done > $OUT/done
