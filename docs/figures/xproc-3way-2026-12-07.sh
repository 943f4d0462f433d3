#!/bin/bash
# Cross-process rounds of the aaa-peer pair, three builds in turn: 1077a2c
# (main0), HEAD (head) and HEAD with a candidate patch (p110). Each round
# runs the three in one of the six orders, in turn, so that every build
# runs first, second and third equally often over six rounds.
cd /tmp
orders=("main0 head p110" "head p110 main0" "p110 main0 head" "main0 p110 head" "p110 head main0" "head main0 p110")
out=${OUT:-/work/notes/x3}
mkdir -p "$out"
for r in $(seq 1 ${1:-12}); do
  for t in ${orders[$(( (r - 1) % 6 ))]}; do
    /tmp/bench-head --only xproc --pairs aaa-peer+aaa-peer --xruns 1 --aaa-peer /tmp/aaa-peer-$t > "$out/r$r-$t.txt" 2>&1
  done
done
echo done > "$out/done"
