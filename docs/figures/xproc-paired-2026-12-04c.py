# Paired HEAD/1077a2c ratios at 256 and 1 callers: this sitting (xp4) and pooled with the two earlier sittings (xp: 20 rounds, xp3: 30).
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
if len(sys.argv)>1: # other sittings: their directories under /work/notes
    sets={d:load(d) for d in sys.argv[1:]}
else:
    sets={'xp4':load('xp4')}
    sets['pool']=load('xp')+load('xp3')+sets['xp4']
for name,rs in sets.items():
    print(name,'rounds',len(rs))
    for callers in (256,1):
        for k in ('rate','cpu','ccpu','scpu','p50'):
            a=[r['main0'][callers][k] for r in rs]; b=[r['head'][callers][k] for r in rs]
            m,lo,hi=ci([y/x for x,y in zip(a,b)])
            print(f"  {callers:3d} {k:5s} 1077a2c {st.median(a):9.2f} ({min(a):.2f}-{max(a):.2f}) HEAD {st.median(b):9.2f} ({min(b):.2f}-{max(b):.2f}) HEAD/1077a2c {m:.3f} [{lo:.3f}, {hi:.3f}]")
