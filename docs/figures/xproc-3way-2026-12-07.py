# Ratios of the three-build rounds (xproc-3way-2026-12-07.sh): HEAD/1077a2c
# and p110/HEAD at 256 and 1 callers, the median of the per-round ratios
# with a 95% bootstrap interval. Usage: python3 xproc-3way-2026-12-07.py DIR
import re, glob, statistics as st, random, sys

def load(d):
    rows = {}
    for f in glob.glob(f'{d}/r*-*.txt'):
        m = re.match(r'.*/r(\d+)-(\w+)\.txt', f)
        r, t = int(m.group(1)), m.group(2)
        for line in open(f):
            c = [x.strip() for x in line.strip().strip('|').split('|')]
            if len(c) >= 9 and c[0] == 'aaa-peer client + aaa-peer server' and c[1].isdigit():
                rows.setdefault(r, {}).setdefault(t, {})[int(c[1])] = dict(
                    rate=float(c[2]), p50=float(c[3]), ccpu=float(c[5]), scpu=float(c[6]), cpu=float(c[5]) + float(c[6]))
    return [rows[r] for r in sorted(rows) if len(rows[r]) == 3 and all(len(v) == 2 for v in rows[r].values())]

def ci(pr):
    random.seed(1)
    bs = sorted(st.median(random.choices(pr, k=len(pr))) for _ in range(4000))
    return st.median(pr), bs[100], bs[3899]

rs = load(sys.argv[1])
print('rounds', len(rs))
for num, den in (('head', 'main0'), ('p110', 'head')):
    print(f'{num}/{den}')
    for callers in (256, 1):
        for k in ('rate', 'cpu', 'ccpu', 'scpu', 'p50'):
            a = [r[den][callers][k] for r in rs]
            b = [r[num][callers][k] for r in rs]
            m, lo, hi = ci([y / x for x, y in zip(a, b)])
            print(f'  {callers:3d} {k:5s} {den} {st.median(a):10.2f} ({min(a):.2f}-{max(a):.2f})  {num} {st.median(b):10.2f} ({min(b):.2f}-{max(b):.2f})  {m:.3f} [{lo:.3f}, {hi:.3f}]')
