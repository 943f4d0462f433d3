#!/bin/bash
# Each outbox mutant alone: TestSim at 300 seeds (4 min bound); caught = a seed failed.
cd ${DIR:-/work/main}
n=$(python3 -c "exec(open('/work/notes/mut16/muts.py').read()); print(len(M))")
for i in $(seq 0 $((n-1))); do
  name=$(python3 - $i <<'PY'
import sys
exec(open('/work/notes/mut16/muts.py').read())
name,old,new=M[int(sys.argv[1])]
p='internal/outbox/outbox.go'; s=open(p).read()
if s.count(old)<1: print(name+' NOT-APPLIED'); sys.exit()
open(p,'w').write(s.replace(old,new,1)); print(name)
PY
)
  if go test -c -o /tmp/mutx.test ./client > /work/notes/mut16/${TAG:-x}-$i.build 2>&1; then built=1; else built=0; fi
  git checkout -q internal/outbox/outbox.go
  if [ $built = 0 ]; then echo "$i $name BUILD-FAILED" >> /work/notes/mut16/table-${TAG:-x}; continue; fi
  (cd client && timeout 280 /tmp/mutx.test -test.run '^TestSim$' -sim.n=300 -test.timeout=4m > /work/notes/mut16/${TAG:-x}-$i.log 2>&1); rc=$?
  first=$(grep -o "seed [0-9]* failed" /work/notes/mut16/${TAG:-x}-$i.log | head -1)
  cnt=$(grep -c "seed [0-9]* failed" /work/notes/mut16/${TAG:-x}-$i.log)
  hang=$(grep -c "test timed out" /work/notes/mut16/${TAG:-x}-$i.log)
  echo "$i $name rc=$rc failed_seeds=$cnt first=[$first] timedout=$hang" >> /work/notes/mut16/table-${TAG:-x}
done
git diff --stat >> /work/notes/mut16/table-${TAG:-x}
echo done >> /work/notes/mut16/table-${TAG:-x}
