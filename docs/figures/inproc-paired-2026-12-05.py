# Ratios of the paired in-process rounds (inproc-paired-2026-12-05.sh):
# python3 inproc-paired-2026-12-05.py DIR
import glob, re, statistics as st, sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
rows = {}
for f in sorted(glob.glob(d + "/r*-*.txt")):
    name = f.rsplit("/", 1)[-1]
    r, t = int(name[1:name.index("-")]), name[name.index("-") + 1:-4]
    m = re.findall(r"\{Impl:([^ ]+(?: [^ ]+)?) Callers:(\d+) AnswersPerS:(\d+) P50us:([\d.]+) P99us:([\d.]+) CPUusPerReq:([\d.]+) AllocsPerReq:([\d.]+)\}", open(f).read())
    rows[(r, t)] = {(i, int(c)): (float(a), float(p), float(cpu), float(al)) for i, c, a, p, _, cpu, al in m}
rounds = sorted({r for r, _ in rows})
for c in (1, 16, 256):
    for what, idx in (("rate", 0), ("cpu", 2)):
        for base in ("go-diameter", "raw"):
            v = {t: [rows[(r, t)][("aaatp", c)][idx] / rows[(r, t)][(base, c)][idx] for r in rounds] for t in ("main0", "head")}
            rel = [h / m for h, m in zip(v["head"], v["main0"])]
            print(f"{c:4} {what:4} aaatp/{base:12} main0 {st.median(v['main0']):.3f} head {st.median(v['head']):.3f} head/main0 {st.median(rel):.3f} ({min(rel):.3f}-{max(rel):.3f})")
    for t in ("main0", "head"):
        print(f"{c:4} {t:5} allocs {[rows[(r, t)][('aaatp', c)][3] for r in rounds]} answers/s {[int(rows[(r, t)][('aaatp', c)][0]) for r in rounds]}")
