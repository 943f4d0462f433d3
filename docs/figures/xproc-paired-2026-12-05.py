# Paired cross-process ratios, HEAD (the aaa-peer build of 518dcc8) against three older builds, at 256 and 1 callers:
# the sittings of 2026-12-05 (each 20 ABBA rounds of xproc-paired-2026-12-04c.sh, its other build at /tmp/aaa-peer-main0):
# xp5 and xp7 against 1077a2c (main before the one-engine work) and their pool, xp6 against f8ea78e (this session's start),
# xp8 against ad613f7 (the HEAD of the sittings of 2026-12-04).
import re,glob,statistics as st,random,sys
def load(d):
    rows={}
    for f in glob.glob(f'/work/notes/{d}/r*-*.txt'):
        m=re.match(r'.*/r(\d+)-(\w+)\.txt',f); r,t=int(m.group(1)),m.group(2)
        for line in open(f):
            c=[x.strip() for x in line.strip().strip('|').split('|')]
            if len(c)>=9 and c[0]=='aaa-peer client + aaa-peer server' and c[1].isdigit():
                rows.setdefault(r,{}).setdefault(t,{})[int(c[1])]=dict(rate=float(c[2]),p50=float(c[3]),ccpu=float(c[5]),scpu=float(c[6]),cpu=float(c[5])+float(c[6]))
    return [rows[r] for r in sorted(rows) if len(rows[r])==2 and all(len(v)==2 for v in rows[r].values())]
def ci(pr):
    random.seed(1); bs=sorted(st.median(random.choices(pr,k=len(pr))) for _ in range(4000))
    return st.median(pr),bs[100],bs[3899]
sets=[('xp5','1077a2c',load('xp5')),('xp7','1077a2c',load('xp7'))]
sets.append(('xp5+xp7','1077a2c',sets[0][2]+sets[1][2]))
sets+=[('xp6','f8ea78e',load('xp6')),('xp8','ad613f7',load('xp8'))]
for name,base,rs in sets:
    print(name,'HEAD against',base,'rounds',len(rs))
    for callers in (256,1):
        for k in ('rate','cpu','ccpu','scpu','p50'):
            a=[r['main0'][callers][k] for r in rs]; b=[r['head'][callers][k] for r in rs]
            m,lo,hi=ci([y/x for x,y in zip(a,b)])
            print(f"  {callers:3d} {k:5s} {base} {st.median(a):9.2f} ({min(a):.2f}-{max(a):.2f}) HEAD {st.median(b):9.2f} ({min(b):.2f}-{max(b):.2f}) HEAD/{base} {m:.3f} [{lo:.3f}, {hi:.3f}]")
if '--rounds' in sys.argv:
    for name,base,rs in sets[:2]+sets[3:]:
        print(f"\n{name}, against {base}:\n\n| round | {base}: answers/s, CPU us/answer at 256 | HEAD: the same | HEAD / {base} answers/s | one-caller p50 us, {base} / HEAD |\n|--:|---|---|--:|---|")
        for i,r in enumerate(rs,1):
            a,b=r['main0'],r['head']
            print(f"| {i} | {a[256]['rate']:.0f}, {a[256]['cpu']:.2f} | {b[256]['rate']:.0f}, {b[256]['cpu']:.2f} | {b[256]['rate']/a[256]['rate']:.3f} | {a[1]['p50']:.0f} / {b[1]['p50']:.0f} |")
