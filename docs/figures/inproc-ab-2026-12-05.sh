#!/bin/bash
# usage: ab.sh A B rounds bench [benchtime]
a=$1; b=$2; n=$3; bench=$4; bt=${5:-1000000x}
for i in $(seq $n); do
  if (( i % 2 )); then o="$a $b"; else o="$b $a"; fi
  for t in $o; do echo "$t $(/tmp/cl-$t.test -test.run '^$' -test.bench "$bench" -test.benchtime $bt 2>&1 | grep Benchmark)"; done
done
