#!/bin/bash
# The simulators' soak: seeds 1..N of each carrier's simulator (TestSim,
# TestSimRADIUSStream, TestSimUDP) on one test binary, in chunks of
# $CHUNK seeds taken in turn for the three carriers, so that a run cut
# short keeps what it did and starts again where it stopped (a chunk
# whose log ends in rc=0 is not run again). Each chunk's log gives its
# start, end and the test's verdict; a failing seed is named with the
# flag that replays it. Summary: docs/figures/soak-2026-12-07.py OUT.
#
#   go test -c -o OUT/client.test ./client   # the build under test
#   OUT=/work/notes/soak40 bash docs/figures/soak-2026-12-07.sh 100000
#
# SIMS picks the carriers (default all three), e.g. SIMS="sim:TestSim
# usim:TestSimUDP" for a change that only the RADIUS stream carrier runs.
set -u
n=${1:-100000}
chunk=${CHUNK:-1000}
out=${OUT:?set OUT to the folder of the build and the logs}
cd "$(dirname "$0")/../../client" || exit 1
[ -x "$out/client.test" ] || { echo "no $out/client.test: build it first" >&2; exit 1; }
for ((from = 1; from <= n; from += chunk)); do
  for sim in ${SIMS:-sim:TestSim ssim:TestSimRADIUSStream usim:TestSimUDP}; do
    flag=${sim%%:*} test=${sim#*:}
    log=$out/$flag-$from.log
    tail -n1 "$log" 2>/dev/null | grep -qx 'rc=0' && continue
    {
      echo "start $(date -u +%FT%TZ) $test seeds $from..$((from + chunk - 1))"
      GOMAXPROCS=${PROCS:-8} nice -n ${NICE:-19} "$out/client.test" -test.run "^$test\$" \
        -$flag.n=$chunk -sim.from=$from -test.timeout=2h 2>&1
      rc=$?
      echo "end $(date -u +%FT%TZ)"
      echo "rc=$rc"
    } > "$log"
  done
done
echo "done $(date -u +%FT%TZ)" > "$out/done"
