#!/bin/bash
# One aaa-peer pair at 256 callers for 20 s; perf samples both processes (cpu-clock, 2 kHz) from t=3s for 15 s.
bin=$1; out=$2; d=$(mktemp -d)
$bin server --listen tcp://127.0.0.1:0 --origin-host server.example.net --origin-realm example.net --ready $d/ready --log-level error > $d/srv.out 2>&1 &
spid=$!
for i in $(seq 50); do [ -s $d/ready ] && break; sleep 0.1; done
addr=$(head -1 $d/ready | sed 's#.*//##')
$bin client --peer tcp://$addr --origin-host client.example.net --origin-realm example.net --destination-realm example.net --concurrency 256 --duration 20s --app acct --report $d/report.json --log-level error --max-failed 1 > $d/cli.out 2>&1 &
cpid=$!
sleep 3
perf record -q -e cpu-clock -F 2000 -p $cpid -o $out-client.data -- sleep 15 2>/dev/null &
perf record -q -e cpu-clock -F 2000 -p $spid -o $out-server.data -- sleep 15 2>/dev/null &
wait $cpid
sleep 1
kill -INT $spid; wait $spid 2>/dev/null
echo "$out $(grep -o '"answered": [0-9]*' $d/report.json)" | tee -a /work/notes/xp2/perf-answers
rm -rf $d
