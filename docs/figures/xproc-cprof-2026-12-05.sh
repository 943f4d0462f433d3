#!/bin/bash
# cprof.sh BIN OUT: aaa-peer pair at 256 callers 15 s, the client's CPU profile to OUT.prof, answers to OUT.ans
bin=$1; out=$2; d=$(mktemp -d)
$bin server --listen tcp://127.0.0.1:0 --origin-host server.example.net --origin-realm example.net --ready $d/ready --log-level error > $d/srv.out 2>&1 &
spid=$!
for i in $(seq 50); do [ -s $d/ready ] && break; sleep 0.1; done
addr=$(head -1 $d/ready | sed 's#.*//##')
$bin client --peer tcp://$addr --origin-host client.example.net --origin-realm example.net --destination-realm example.net --concurrency 256 --duration 15s --app acct --report $d/report.json --log-level error --max-failed 1 --cpuprofile $out.prof > $d/cli.out 2>&1
grep -o '"answered": [0-9]*' $d/report.json | head -1 | grep -o '[0-9]*' > $out.ans
kill -INT $spid; wait $spid 2>/dev/null
rm -rf $d
