#!/bin/bash
# sysc.sh BIN OUT: aaa-peer pair at 256 callers 12 s; perf stat syscall counts of client and server for 8 s from t=3s.
bin=$1; out=$2; d=$(mktemp -d)
$bin server --listen tcp://127.0.0.1:0 --origin-host server.example.net --origin-realm example.net --ready $d/ready --log-level error > $d/srv.out 2>&1 &
spid=$!
for i in $(seq 50); do [ -s $d/ready ] && break; sleep 0.1; done
addr=$(head -1 $d/ready | sed 's#.*//##')
$bin client --peer tcp://$addr --origin-host client.example.net --origin-realm example.net --destination-realm example.net --concurrency 256 --duration 12s --app acct --report $d/report.json --log-level error --max-failed 1 > $d/cli.out 2>&1 &
cpid=$!
sleep 3
E=raw_syscalls:sys_enter,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_read,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,syscalls:sys_enter_sched_yield,context-switches,task-clock
perf stat -x, -e $E -p $cpid -o $out-client.txt -- sleep 8 &
perf stat -x, -e $E -p $spid -o $out-server.txt -- sleep 8 &
wait $cpid
kill -INT $spid; wait $spid 2>/dev/null
echo "$(grep -o '"answered": [0-9]*' $d/report.json | head -1)" > $out-answers.txt
rm -rf $d
