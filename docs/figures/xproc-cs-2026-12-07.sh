#!/bin/bash
# One run of aaa-peer client (build $1: /tmp/aaa-peer-$1; run number $2) at
# 256 callers for 8 s against 1077a2c's aaa-peer server, the same server
# for every client build, under perf stat (context switches, task clock).
# Run in /tmp/cs39; speed-2026-12-07.md has the loop and the summary.
# $1: client build (head|main0). Server: main0's, the same for both.
rm -f ready
/tmp/aaa-peer-main0 server --listen tcp://127.0.0.1:0 --origin-host srv.example.net --origin-realm example.net --ready ready --log-level error > srv.log 2>&1 &
spid=$!
for i in $(seq 50); do [ -s ready ] && break; sleep 0.1; done
addr=$(cat ready | tr -d '\n')
perf stat -e context-switches,cpu-migrations,task-clock -x, -o cs-$1-$2.txt /tmp/aaa-peer-$1 client --peer $addr --origin-host cli.example.net --origin-realm example.net --destination-realm example.net --concurrency 256 --duration 8s --app acct --report rep-$1-$2.json --log-level error --max-failed 1 > cli-$1-$2.log 2>&1
kill $spid; wait $spid 2>/dev/null
